"""The database implementation of the agents' checkpoint store, and the state of a checkpoint
row for the desk's own readers (its open batch checked against the run's log).

A row keeps the snapshot's `message_count` in its own column (the stores index on it) and
not again in its JSON (the storage target of `make bench` #5: the JSON of most checkpoints is little
more than a count and a version). Read a row's snapshot whole with `snapshot_of(row)`, and
write one with `snapshot_column(snapshot)`; `AgentState.from_snapshot(row.snapshot)` would
read a count of 0. Old rows still hold the count in their JSON too; the column wins.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import Max

from agents.state import SCHEMA_VERSION, AgentState
from agents.store import Checkpoint as StoredCheckpoint
from reviewdesk.runs.models import Checkpoint, Message
from reviewdesk.runs.rows import checkpoint_latest, checkpoint_latest_with_messages, checkpoints_insert


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
        # No savepoint: the caller's fenced transaction rolls back as a whole.
        with transaction.atomic(savepoint=False):
            last = self._last(run_id)
            rows = checkpoints_insert(
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
        """The latest checkpoint and the live messages it covers, in one read."""
        found = checkpoint_latest_with_messages(run_id)
        self._last_number[run_id] = found[0].number if found else 0
        if found is None:
            return None
        row, messages = found
        return _stored(row), messages

    def get(self, checkpoint_id: str) -> StoredCheckpoint | None:
        row = Checkpoint.objects.filter(pk=checkpoint_id).first()
        return _stored(row) if row else None

    def list(self, run_id: str) -> list[StoredCheckpoint]:
        return [_stored(row) for row in Checkpoint.objects.filter(run_id=run_id).order_by("number")]


def latest_checkpoint(run_id: Any) -> Checkpoint | None:
    """The run's latest checkpoint row: a decision asks whether its call still waits there, a
    worker where to continue."""
    return checkpoint_latest(run_id)


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
