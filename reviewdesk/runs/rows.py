"""The runs app's hand-written SQL: each statement behind one named function, for a measured
reason given in its docstring. Everywhere else the ORM is the way in; `reviewdesk.lib.db_rows`
is imported by the apps' `rows.py` modules and nothing else (a `protected` contract).

These run on every cycle of the worker (claim, fence, steps, ledger, finish) and on submit.
Building a QuerySet and compiling its SQL cost more there than the round trip and the rows:
a join with `select_related` about 2 ms against 0.1 ms on the wire, the fence's ORM read about
half its time (`make bench` #2, #4, #6). A hand-written write sends no model signal and
resolves no expression: these models have no receivers, and the values are plain.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import NotSupportedError, connection, models
from django.db.models import Func, TextField

from reviewdesk.approvals.models import ApprovalRequest
from reviewdesk.lib.db_rows import (
    Columns,
    column,
    fetchone,
    for_update_of,
    insert,
    insert_many,
    prep,
    table,
    update,
    update_by_pk,
)
from reviewdesk.runs.models import Attempt, Checkpoint, Message, Run, RunKind, RunStatus, SideEffect


def run_insert(run: Run) -> Run:
    """A submitted run, in one hand-written INSERT: submit is on the API's hot path, where
    compiling the ORM's INSERT for the run's columns cost more than sending it."""
    return insert(run)


def run_update(run: Run, names: Sequence[str]) -> None:
    """Write `names` of a run whose row the caller holds locked (a requeue, a finish): once or
    twice a cycle, where the ORM's save compiled its UPDATE each time."""
    update(run, names)


def attempt_insert(attempt: Attempt) -> Attempt:
    """The claimed run's new attempt, in the claim's transaction: one per task, not compiled."""
    return insert(attempt)


def attempt_end(attempt_pk: Any, *, status: str, ended_at: datetime, error: str) -> None:
    """An attempt's end, written with its run's finish: once a task, not compiled."""
    update_by_pk(Attempt, attempt_pk, status=status, ended_at=ended_at, error=error)


def messages_insert(messages: Sequence[Message]) -> None:
    """A step's new messages, in one statement with the step's other writes (every step)."""
    insert_many(messages)


def checkpoints_insert(checkpoints: Sequence[Checkpoint]) -> list[Checkpoint]:
    """Steps' checkpoints, numbered in order, in one statement (every step)."""
    return insert_many(checkpoints)


def side_effect_status(key: str) -> tuple[str, Any] | None:
    """(status, result) of the ledger row the idempotency key names: two columns of one row,
    read before every gated call, with no model built and no SQL compiled."""
    columns = Columns.of(SideEffect, "e", "status", "result")
    sql = f"SELECT {columns.sql} FROM {table(SideEffect)} e WHERE e.{column(SideEffect, 'idempotency_key')} = %s"
    row = fetchone(sql, [key])
    if row is None:
        return None
    status, result = columns.values(row)
    return status, result


def side_effect_insert(effect: SideEffect) -> SideEffect:
    """A ledger row (pending, or confirmed with its effect), in the gate's transaction: once per
    call that changes the world, not compiled."""
    return insert(effect)


def run_claim_due(run_id: Any, now: datetime) -> Run | None:
    """Claim the run if it is queued and due, in one statement: an UPDATE that returns the row
    it changed, locked until the claim commits. None when it is not (an expired lease, another
    worker's run, one not due or ended: `run_claim`'s locked read then decides). The ORM's
    locked read and its save were two round trips and two compilations a task (`make bench` #2, #6);
    the row comes back through a plain cursor, built as the ORM builds it (db_rows.Columns).
    The submitter is read when an approval first names it, not with every claim."""
    table, column = _run_sql_names()
    returned = Columns.of(Run, Run._meta.db_table)
    sql = (
        f"UPDATE {table} SET {column['status']} = %s, "
        f"{column['lease_epoch']} = {column['lease_epoch']} + 1, {column['lease_expires_at']} = %s, "
        f"{column['next_attempt_at']} = NULL, {column['revision']} = {column['revision']} + 1, "
        f"{column['updated_at']} = %s "
        f"WHERE {column['id']} = %s AND {column['status']} = %s AND {column['kind']} = %s "
        f"AND ({column['next_attempt_at']} IS NULL OR {column['next_attempt_at']} <= %s) RETURNING {returned.sql}"
    )
    at = connection.ops.adapt_datetimefield_value
    expires = now + timedelta(seconds=settings.DESK_LEASE_SECONDS)
    pk = Run._meta.get_field("id")
    assert isinstance(pk, models.Field)
    params = [RunStatus.RUNNING.value, at(expires), at(now), pk.get_db_prep_value(run_id, connection)]
    # Internal runs only: an external run's framework executes it (runs/external/).
    row = fetchone(sql, [*params, RunStatus.QUEUED.value, RunKind.INTERNAL.value, at(now)])
    return None if row is None else returned.build(row)


def _run_sql_names() -> tuple[str, dict[str, str]]:
    """The run table's name and the claim's columns, quoted for this connection's SQL."""
    quote = connection.ops.quote_name
    names = (
        "id",
        "status",
        "kind",
        "lease_epoch",
        "lease_expires_at",
        "next_attempt_at",
        "revision",
        "updated_at",
    )
    columns = {}
    for name in names:
        field = Run._meta.get_field(name)
        assert isinstance(field, models.Field) and field.column
        columns[name] = quote(field.column)
    return quote(Run._meta.db_table), columns


def run_locked(run_pk: Any, *, with_submitter: bool = False, of_approval: bool = False) -> Run:
    """The run, its row locked until the transaction ends (not its submitter's), with its
    submitter when asked: one hand-written statement, as the ORM's select_for_update read but
    not compiled each time (a decision and a worker's finish each take one). With
    `of_approval`, `run_pk` is the id of one of its approval requests. Raises Run.DoesNotExist,
    as the ORM's `get` does."""
    user_model = get_user_model()
    run, user = Columns.of(Run, "r"), Columns.of(user_model, "u")
    join = ""
    if with_submitter:
        join = (
            f"JOIN {table(user_model)} u ON u.{column(user_model, 'id')} = r.{column(Run, 'submitted_by')} "
        )
    key = "%s"
    if of_approval:
        request = ApprovalRequest
        key = f"(SELECT {column(request, 'run')} FROM {table(request)} WHERE {column(request, 'id')} = %s)"
    sql = (
        f"SELECT {run.sql}{', ' + user.sql if with_submitter else ''} FROM {table(Run)} r {join}"
        f"WHERE r.{column(Run, 'id')} = {key}{for_update_of('r')}"
    )
    row = fetchone(sql, [prep(ApprovalRequest if of_approval else Run, "id", run_pk)])
    if row is None:
        raise Run.DoesNotExist(f"run {run_pk} does not exist")
    locked = run.build(row)
    if with_submitter:
        locked.submitted_by = user.build(row, run.width)
    return locked


def run_owner(run_pk: Any, *, lock: bool) -> RunOwner:
    """The run's `OWNER_FIELDS` in one hand-written statement; with `lock`, the row stays
    locked until the transaction ends (FOR UPDATE; SQLite's writing transactions already
    exclude each other). Every fenced write reads these, several times a cycle: the ORM's
    query compilation and model building were about half of each fence's time (`make bench` #2
    and #4). Raises Run.DoesNotExist, as the ORM's `get` did."""
    quote = connection.ops.quote_name
    columns = ", ".join(quote(_run_column(name)) for name in OWNER_FIELDS)
    pk = Run._meta.pk
    assert pk is not None
    sql = f"SELECT {columns} FROM {quote(Run._meta.db_table)} WHERE {quote(pk.column)} = %s"
    if lock and connection.features.has_select_for_update:
        sql += " FOR UPDATE"
    with connection.cursor() as cursor:
        cursor.execute(sql, [pk.get_db_prep_value(run_pk, connection)])
        row = cursor.fetchone()
    if row is None:
        raise Run.DoesNotExist(f"run {run_pk} does not exist")
    return RunOwner(run_pk, *row)


def checkpoint_latest(run_id: Any) -> Checkpoint | None:
    """The run's latest checkpoint row, in one hand-written statement: a decision asks whether
    its call still waits there, a worker where to continue."""
    found = _checkpoint_latest_row(run_id, with_log=False)
    return None if found is None else found[0]


def checkpoint_latest_with_messages(run_id: Any) -> tuple[Checkpoint, list[dict[str, Any]]] | None:
    """The latest checkpoint and the live messages it covers, in one hand-written statement: a
    resume's two reads in one round trip, and no SQL compiled for it (`make bench` #2, #4)."""
    found = _checkpoint_latest_row(run_id, with_log=True)
    if found is None:
        return None
    row, log = found
    return row, MessagesCovered.decode(log, pairs=connection.vendor == "sqlite")


def _checkpoint_latest_row(run_id: Any, *, with_log: bool) -> tuple[Checkpoint, str | None] | None:
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


# What says whether an attempt still owns its run (`host.DatabaseHost._checked`).
OWNER_FIELDS = ("status", "lease_epoch", "cancel_epoch")


@dataclass(frozen=True)
class RunOwner:
    """The run row's `OWNER_FIELDS`, as the fence reads them."""

    id: Any
    status: str
    lease_epoch: int
    cancel_epoch: int


def _run_column(name: str) -> str:
    field = Run._meta.get_field(name)
    assert isinstance(field, models.Field) and field.column
    return field.column


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
