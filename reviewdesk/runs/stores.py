"""The database implementation of the agents' checkpoint store, and the state of a checkpoint
row for the desk's own readers (its open batch checked against the run's log).

A row keeps the snapshot's `message_count` in its own column (the stores index on it) and
not again in its JSON (issue 11's storage target: the JSON of most checkpoints is little
more than a count and a version). Read a row's snapshot whole with `snapshot_of(row)`, and
write one with `snapshot_column(snapshot)`; `AgentState.from_snapshot(row.snapshot)` would
read a count of 0. Old rows still hold the count in their JSON too; the column wins.
"""

from __future__ import annotations

import json
from typing import Any

from django.db import NotSupportedError, connection, transaction
from django.db.models import Func, Max, TextField

from agents.state import SCHEMA_VERSION, AgentState
from agents.store import Checkpoint as StoredCheckpoint
from reviewdesk.lib.db_rows import Columns, column, fetchone, insert_many, prep, table
from reviewdesk.runs.models import Checkpoint, Message


def snapshot_column(snapshot: dict[str, Any]) -> dict[str, Any]:
    """What a row's `snapshot` column holds of `snapshot`: all but the count its column has."""
    return {key: value for key, value in snapshot.items() if key != "message_count"}


def snapshot_of(row: Checkpoint) -> dict[str, Any]:
    """The snapshot a row holds, whole."""
    return {**row.snapshot, "message_count": row.message_count}


def _stored(row: Checkpoint) -> StoredCheckpoint:
    return StoredCheckpoint(
        id=str(row.id),
        run_id=str(row.run_id),
        snapshot=snapshot_of(row),
        message_count=row.message_count,
        created_at=row.created_at,
    )


class DatabaseCheckpointStore:
    def __init__(self, *, attempt_id: int | None = None, branch: int = 0) -> None:
        self.attempt_id = attempt_id
        self.branch = branch
        # The last checkpoint number this store read or wrote, per run. A worker writes only
        # under its lease, so nobody else numbers the run's checkpoints meanwhile; a stale
        # number could only collide on the unique (run, number) constraint, never reorder.
        self._last_number: dict[str, int] = {}

    def known_last_number(self, run_id: str) -> int | None:
        """The run's highest checkpoint number as this store last read or wrote it; None when it
        has not touched the run."""
        return self._last_number.get(run_id)

    def put(
        self, run_id: str, snapshot: dict[str, Any], *, checkpoint_id: str | None = None
    ) -> StoredCheckpoint:
        return self.put_many(run_id, [(snapshot, checkpoint_id)])[0]

    def _row(
        self, run_id: str, number: int, snapshot: dict[str, Any], checkpoint_id: str | None
    ) -> Checkpoint:
        fields = {"id": checkpoint_id} if checkpoint_id else {}
        return Checkpoint(
            run_id=run_id,
            attempt_id=self.attempt_id,
            branch=self.branch,
            number=number,
            schema_version=snapshot.get("schema_version", SCHEMA_VERSION),
            message_count=snapshot["message_count"],
            snapshot=snapshot_column(snapshot),
            **fields,
        )

    def _last(self, run_id: str) -> int:
        """The run's highest checkpoint number: the one this store last read or wrote."""
        last = self._last_number.get(run_id)
        if last is None:
            last = Checkpoint.objects.filter(run_id=run_id).aggregate(n=Max("number"))["n"] or 0
        return last

    def put_many(
        self, run_id: str, snapshots: list[tuple[dict[str, Any], str | None]]
    ) -> list[StoredCheckpoint]:
        """`put` for several (snapshot, checkpoint id) pairs, numbered in order, in one statement."""
        # No savepoint: the caller's fenced transaction rolls back as a whole (issue 11).
        with transaction.atomic(savepoint=False):
            last = self._last(run_id)
            rows = insert_many(
                [
                    self._row(run_id, last + 1 + i, snapshot, checkpoint_id)
                    for i, (snapshot, checkpoint_id) in enumerate(snapshots)
                ]
            )
            self._last_number[run_id] = last + len(rows)
        return [_stored(row) for row in rows]

    def latest(self, run_id: str) -> StoredCheckpoint | None:
        row = latest_checkpoint(run_id)
        self._last_number[run_id] = row.number if row else 0
        return _stored(row) if row else None

    def latest_with_messages(self, run_id: str) -> tuple[StoredCheckpoint, list[dict[str, Any]]] | None:
        """The latest checkpoint and the live messages it covers, in one hand-written statement
        (a resume's two reads in one round trip, and no SQL compiled for it; issue 11)."""
        found = _latest_row(run_id, with_log=True)
        self._last_number[run_id] = found[0].number if found else 0
        if found is None:
            return None
        row, log = found
        return _stored(row), MessagesCovered.decode(log, pairs=connection.vendor == "sqlite")

    def get(self, checkpoint_id: str) -> StoredCheckpoint | None:
        row = Checkpoint.objects.filter(pk=checkpoint_id).first()
        return _stored(row) if row else None

    def list(self, run_id: str) -> list[StoredCheckpoint]:
        return [_stored(row) for row in Checkpoint.objects.filter(run_id=run_id).order_by("number")]


def latest_checkpoint(run_id: Any) -> Checkpoint | None:
    """The run's latest checkpoint row, in one hand-written statement: a decision asks whether
    its call still waits there, a worker where to continue (issue 11)."""
    found = _latest_row(run_id, with_log=False)
    return None if found is None else found[0]


def _latest_row(run_id: Any, *, with_log: bool) -> tuple[Checkpoint, str | None] | None:
    """The run's latest checkpoint row and, `with_log`, the live messages it covers as
    `MessagesCovered` gives them (which names the checkpoint table itself, so no alias here)."""
    columns = Columns.of(Checkpoint, Checkpoint._meta.db_table)
    log = f", {MessagesCovered().as_sql(None, connection)[0]}" if with_log else ""
    sql = (
        f"SELECT {columns.sql}{log} FROM {table(Checkpoint)} WHERE {column(Checkpoint, 'run')} = %s "
        f"ORDER BY {column(Checkpoint, 'number')} DESC LIMIT 1"
    )
    found = fetchone(sql, [prep(Checkpoint, "run", run_id)])
    if found is None:
        return None
    return columns.build(found), (found[-1] if with_log else None)


def checkpoint_state(row: Checkpoint) -> AgentState:
    """The state a checkpoint row holds, its open batch checked against the run's live log
    and completed from it (one query when a batch is open). SnapshotError when the log's
    message there is not the batch's (AgentState.resolve_batch)."""
    state = AgentState.from_snapshot(snapshot_of(row))
    if state.batch:
        body = (
            Message.objects.filter(
                run_id=row.run_id, position=state.batch_position, superseded_at__isnull=True
            )
            .values_list("body", flat=True)
            .first()
        )
        state.resolve_batch(body)
    return state


class MessagesCovered(Func):
    """On a checkpoint row: the bodies of the live messages it covers, in position order, as
    one JSON array (text; `decode` reads it)."""

    output_field = TextField()

    def as_sql(self, compiler: Any, connection: Any, **extra: Any) -> tuple[str, list]:  # type: ignore[override]
        checkpoint = connection.ops.quote_name(Checkpoint._meta.db_table)
        message = connection.ops.quote_name(Message._meta.db_table)
        where = (
            f"m.run_id = {checkpoint}.run_id AND m.position < {checkpoint}.message_count "
            "AND m.superseded_at IS NULL"
        )
        if connection.vendor == "postgresql":
            return (
                f"(SELECT COALESCE(json_agg(m.body ORDER BY m.position), '[]')::text FROM {message} m WHERE {where})",
                [],
            )
        if connection.vendor == "sqlite":
            # No ORDER BY inside an aggregate before SQLite 3.44: each body with its position.
            return (
                f"(SELECT json_group_array(json_array(m.position, json(m.body))) FROM {message} m WHERE {where})",
                [],
            )
        raise NotSupportedError(f"MessagesCovered: no SQL for {connection.vendor}")

    @staticmethod
    def decode(value: str | None, *, pairs: bool) -> list[dict[str, Any]]:
        """The bodies; with `pairs` (SQLite), sorted by the position each came with."""
        items = json.loads(value) if value else []
        return [body for _position, body in sorted(items, key=lambda item: item[0])] if pairs else items
