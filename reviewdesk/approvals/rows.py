"""The approvals app's hand-written SQL: each statement behind one named function, for a
measured reason given in its docstring. Everywhere else the ORM is the way in; `lib.db_rows` is
imported by the apps' `rows.py` modules and nothing else (a `protected` contract).

These run on every decision and on the worker's way to a tool, where building a QuerySet and
compiling its SQL cost more than the round trip and the rows (about 2 ms for a join with
`select_related`, against 0.1 to 0.2 ms on the wire: `make bench` #2 and #6). The models come
back as the ORM builds them (`lib.db_rows.Columns`). A hand-written write sends no model signal
and resolves no expression: these models have no receivers, and the values are plain.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connection
from django.utils import timezone

from agents.state import CallState
from reviewdesk.approvals.models import ApprovalRequest, ApprovalStatus, Decision, Grant, GrantScope, GrantUse
from reviewdesk.lib.db import prefetched_as
from reviewdesk.lib.db_rows import (
    Columns,
    column,
    fetchall,
    fetchone,
    for_update_of,
    insert,
    prep,
    table,
    update,
    write,
)
from reviewdesk.runs.models import Attempt, Run


def approval_insert(approval: ApprovalRequest) -> ApprovalRequest:
    """A request raised by the worker, in its step's transaction: not compiled for every one."""
    return insert(approval)


def approval_update(approval: ApprovalRequest, names: Sequence[str]) -> None:
    """Write `names` of a request whose run the caller holds locked (a decision settling it, a
    run's end cancelling it): on every decision's way, where the ORM's save compiled its UPDATE."""
    update(approval, names)


def decision_insert(decision: Decision) -> Decision:
    """A signed decision, in the decide transaction: not compiled for every decision."""
    return insert(decision)


def decision_mark_consumed(decision_id: str) -> bool:
    """Mark the decision used, once: False when it already was (a replay). On the worker's way
    to the tool, the ORM's UPDATE compiled for longer than it ran (`make bench` #2). The id is
    checked as a UUID as the ORM checks it (ValidationError)."""
    sql = (
        f"UPDATE {table(Decision)} SET {column(Decision, 'consumed_at')} = %s "
        f"WHERE {column(Decision, 'id')} = %s AND {column(Decision, 'consumed_at')} IS NULL"
    )
    now = prep(Decision, "consumed_at", timezone.now())
    return write(sql, [now, prep(Decision, "id", decision_id)]) == 1


def approval_locked_with_attempt(approval_pk: Any) -> ApprovalRequest:
    """The approval, its row locked (not its attempt's), with its attempt, which the decision's
    payload names (none for a request raised without one): one hand-written statement."""
    approval, attempt = Columns.of(ApprovalRequest, "a"), Columns.of(Attempt, "t")
    sql = (
        f"SELECT {approval.sql}, {attempt.sql} FROM {table(ApprovalRequest)} a "
        f"LEFT JOIN {table(Attempt)} t ON t.{column(Attempt, 'id')} = a.{column(ApprovalRequest, 'attempt')} "
        f"WHERE a.{column(ApprovalRequest, 'id')} = %s{for_update_of('a')}"
    )
    row = fetchone(sql, [prep(ApprovalRequest, "id", approval_pk)])
    if row is None:
        raise ApprovalRequest.DoesNotExist(f"approval {approval_pk} does not exist")
    locked = approval.build(row)
    locked.attempt = None if locked.attempt_id is None else attempt.build(row, approval.width)
    return locked


def grants_live_for(*, run: Run, tool: str) -> list[Grant]:
    """The grants that may still allow a call of `tool` in `run` (not revoked, not expired, not
    used up; scoped to the run, its agent, or everywhere), newest first, each with its maker:
    one hand-written statement, asked before every call that would need a human. A
    pre-filter only: the gate verifies the grant's signature, and counting its use re-reads the
    row (`grant_use`), so a grant revoked or used up meanwhile is refused there."""
    user_model = get_user_model()
    g, u = Columns.of(Grant, "g"), Columns.of(user_model, "u")
    sql = (
        f"SELECT {g.sql}, {u.sql} FROM {table(Grant)} g "
        f"JOIN {table(user_model)} u ON u.{column(user_model, 'id')} = g.{column(Grant, 'granted_by')} "
        f"WHERE g.{column(Grant, 'revoked_at')} IS NULL AND g.{column(Grant, 'expires_at')} > %s "
        # Its uses are its use rows (the unique (grant, number) index answers the count).
        f"AND (SELECT COUNT(*) FROM {table(GrantUse)} gu WHERE gu.{column(GrantUse, 'grant')} = g.{column(Grant, 'id')}) "
        f"< g.{column(Grant, 'max_uses')} AND g.{column(Grant, 'tool')} = %s "
        f"AND ((g.{column(Grant, 'scope')} = %s AND g.{column(Grant, 'run')} = %s) "
        f"OR (g.{column(Grant, 'scope')} = %s AND g.{column(Grant, 'agent')} = %s) OR g.{column(Grant, 'scope')} = %s) "
        # Newest first, as the ORM's query came (Grant.Meta.ordering): the caller's sort is
        # stable, so two grants alike in scope and expiry are tried newest first.
        f"ORDER BY g.{column(Grant, 'created_at')} DESC"
    )
    params = [
        prep(Grant, "expires_at", timezone.now()),
        tool,
        GrantScope.RUN.value,
        prep(Grant, "run", run.pk),
        GrantScope.AGENT.value,
        run.agent,
        GrantScope.GLOBAL.value,
    ]
    rows = fetchall(sql, params)
    grants = []
    for row in rows:
        grant = g.build(row)
        grant.granted_by = u.build(row, g.width)
        grants.append(grant)
    return grants


def approvals_pending_of(run: Run) -> list[ApprovalRequest]:
    """The run's pending requests, in one hand-written read: every run's end asks, and most
    have none left."""
    columns = Columns.of(ApprovalRequest, "a")
    sql = (
        f"SELECT {columns.sql} FROM {table(ApprovalRequest)} a WHERE a.{column(ApprovalRequest, 'run')} = %s "
        f"AND a.{column(ApprovalRequest, 'status')} = %s ORDER BY a.{column(ApprovalRequest, 'created_at')}"
    )
    return [
        columns.build(row)
        for row in fetchall(sql, [prep(ApprovalRequest, "run", run.pk), ApprovalStatus.PENDING.value])
    ]


def request_latest_with_decisions(
    run: Run, call: CallState, kinds: tuple[str, ...]
) -> tuple[ApprovalRequest | None, dict[Any, set[str]]]:
    """The call's latest request of `kinds` (a retry may have raised a new one after a
    cancelled one) with its decisions, their reviewers, and each reviewer's group names.

    One hand-written statement when it has decisions (read from their side, the request, the
    reviewer and their groups joined), two when it has none: on the worker's way to the tool,
    the ORM's two statements spent about 2 ms building and compiling themselves against
    0.2 ms on the wire (`make bench` #2). The models are those the ORM builds (reviewdesk/lib/db_rows.py)."""
    sql, columns = _decisions_sql(len(kinds), connection.vendor)
    params = [prep(ApprovalRequest, "run", run.pk), call.id, *kinds]
    rows = fetchall(sql, params)
    if not rows:
        return _latest_request(params, len(kinds)), {}
    decision_columns, request_columns, user_columns = columns
    approval = request_columns.build(rows[0], decision_columns.width)
    decisions: dict[Any, Decision] = {}
    group_names: dict[Any, set[str]] = {}
    for row in rows:  # a row per decision and group of its reviewer (one with no group: NULL)
        decision_id = row[0]
        if decision_id not in decisions:
            decision = decision_columns.build(row)
            decision.request = approval
            decision.reviewer = user_columns.build(row, decision_columns.width + request_columns.width)
            decisions[decision_id] = decision
            group_names[decision.reviewer_id] = set()
        if row[-1] is not None:
            group_names[decisions[decision_id].reviewer_id].add(row[-1])
    prefetched_as(approval, "decisions", list(decisions.values()))
    return approval, group_names


@cache
def _latest_request_subquery(kinds: int, vendor: str) -> str:
    """The id of a call's latest request of `kinds` kinds (run, call id, then the kinds as
    parameters), newest first as the ORM ordered it."""
    r = ApprovalRequest
    marks = ", ".join(["%s"] * kinds)
    return (
        f"SELECT {column(r, 'id')} FROM {table(r)} WHERE {column(r, 'run')} = %s "
        f"AND {column(r, 'tool_call_id')} = %s AND {column(r, 'kind')} IN ({marks}) "
        f"ORDER BY {column(r, 'created_at')} DESC LIMIT 1"
    )


@cache
def _decisions_sql(kinds: int, vendor: str) -> tuple[str, tuple[Columns, Columns, Columns]]:
    """`request_latest_with_decisions`'s statement and the columns it reads, per number of kinds."""
    user_model = get_user_model()
    through = user_model.groups.through
    group_model = Group
    d, r, u = Columns.of(Decision, "d"), Columns.of(ApprovalRequest, "r"), Columns.of(user_model, "u")
    member_user = column(through, "user")
    member_group = column(through, "group")
    sql = (
        f"SELECT {d.sql}, {r.sql}, {u.sql}, g.{column(group_model, 'name')} "
        f"FROM {table(Decision)} d "
        f"JOIN {table(ApprovalRequest)} r ON r.{column(ApprovalRequest, 'id')} = d.{column(Decision, 'request')} "
        f"JOIN {table(user_model)} u ON u.{column(user_model, 'id')} = d.{column(Decision, 'reviewer')} "
        f"LEFT JOIN {table(through)} m ON m.{member_user} = u.{column(user_model, 'id')} "
        f"LEFT JOIN {table(group_model)} g ON g.{column(group_model, 'id')} = m.{member_group} "
        f"WHERE d.{column(Decision, 'request')} = ({_latest_request_subquery(kinds, connection.vendor)}) "
        f"ORDER BY d.{column(Decision, 'decided_at')}, d.{column(Decision, 'id')}"
    )
    return sql, (d, r, u)


def _latest_request(params: list[Any], kinds: int) -> ApprovalRequest | None:
    """The call's latest request of its kinds, when no decision names it (`params` as for
    `_latest_request_subquery`)."""
    r = Columns.of(ApprovalRequest, "r")
    sql = f"SELECT {r.sql} FROM {table(ApprovalRequest)} r WHERE r.{column(ApprovalRequest, 'id')} = ({_latest_request_subquery(kinds, connection.vendor)})"
    row = fetchone(sql, params)
    return None if row is None else r.build(row)


def decisions_with_notes(run_id: Any, call_ids: list[str]) -> list[Decision]:
    """The decisions with a note on any request of these calls, oldest first, each with its
    request and reviewer: one hand-written statement (every resume asks)."""
    if not call_ids:
        return []
    user_model = get_user_model()
    d, r, u = Columns.of(Decision, "d"), Columns.of(ApprovalRequest, "r"), Columns.of(user_model, "u")
    marks = ", ".join(["%s"] * len(call_ids))
    sql = (
        f"SELECT {d.sql}, {r.sql}, {u.sql} FROM {table(Decision)} d "
        f"JOIN {table(ApprovalRequest)} r ON r.{column(ApprovalRequest, 'id')} = d.{column(Decision, 'request')} "
        f"JOIN {table(user_model)} u ON u.{column(user_model, 'id')} = d.{column(Decision, 'reviewer')} "
        f"WHERE r.{column(ApprovalRequest, 'run')} = %s AND r.{column(ApprovalRequest, 'tool_call_id')} IN ({marks}) "
        f"AND d.{column(Decision, 'note')} <> '' ORDER BY d.{column(Decision, 'decided_at')}"
    )
    rows = fetchall(sql, [prep(ApprovalRequest, "run", run_id), *call_ids])
    decisions = []
    for row in rows:
        decision = d.build(row)
        decision.request = r.build(row, d.width)
        decision.reviewer = u.build(row, d.width + r.width)
        decisions.append(decision)
    return decisions
