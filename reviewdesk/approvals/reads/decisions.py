"""What the worker reads of a call's decisions before it resumes: the latest request with its
decisions and who may decide it (one statement), the signed decision the gate verifies, the
reviewers' notes, and whether a call was decided meanwhile."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connection

from agents.gate import ApprovalGate, CallBinding, SignedDecision
from agents.loop import DecisionState, Reconciled, Rejected
from agents.state import CallState, CallStatus
from reviewdesk.approvals.access import may_decide
from reviewdesk.approvals.models import (
    AWAITING_KINDS,
    ApprovalKind,
    ApprovalRequest,
    ApprovalStatus,
    Decision,
    Verdict,
)
from reviewdesk.lib.db import prefetched_as
from reviewdesk.lib.db_rows import Columns, column, fetchall, fetchone, prep, table
from reviewdesk.runs.models import Run

logger = logging.getLogger(__name__)


@dataclass
class RequestDeciders:
    """The gate's reviewer check (`may_decide_by_name`) for the reviewers who decided one
    request, answered from the rows read with its decisions (`call_decision_read`): the
    request's targets, each reviewer's account and groups, the run's submitter.

    Each answer serves one check, the one the gate makes just after that read; a second check
    of the same reviewer (a retry after a transient failure, perhaps seconds later) finds none
    and reads the database again."""

    run_id: str
    request_id: str
    answers: dict[str, bool]  # username -> qualifies, when read

    def take(self, username: str, run_id: str, request_id: str) -> bool | None:
        """The answer for `username` on this request, once; None when these rows cannot say
        (another request, someone who did not decide it, an answer already used)."""
        if (run_id, request_id) != (self.run_id, self.request_id):
            return None
        return self.answers.pop(username, None)


def call_decision_read(*, run: Run, call: CallState) -> tuple[DecisionState, RequestDeciders | None]:
    """What the loop should do with a waiting call: None (still waiting), a rejection,
    a reconciliation, or the signed decision for the gate to verify. With a signed decision,
    whether each reviewer who decided the request still qualifies (`RequestDeciders`): read
    with it, so the gate's check just after reads nothing again (issue 11, #2)."""
    kind = ApprovalKind.RECONCILE if call.status == CallStatus.UNKNOWN else ApprovalKind.TOOL_CALL
    kinds = (kind,) if kind == ApprovalKind.RECONCILE else AWAITING_KINDS
    approval, group_names = _latest_request_with_decisions(run, call, kinds)
    state = _decision_state(approval, kind)
    if approval is None or not isinstance(state, SignedDecision):
        return state, None  # nothing the gate runs on: no reviewer to check
    return state, _deciders(approval, run, group_names)


def _latest_request_with_decisions(
    run: Run, call: CallState, kinds: tuple[str, ...]
) -> tuple[ApprovalRequest | None, dict[Any, set[str]]]:
    """The call's latest request of `kinds` (a retry may have raised a new one after a
    cancelled one) with its decisions, their reviewers, and each reviewer's group names.

    One hand-written statement when it has decisions (read from their side, the request, the
    reviewer and their groups joined), two when it has none: on the worker's way to the tool,
    the ORM's two statements spent about 2 ms building and compiling themselves against
    0.2 ms on the wire (issue 11, #2). The models are those the ORM builds (reviewdesk/lib/db_rows.py)."""
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
    """`_latest_request_with_decisions`'s statement and the columns it reads, per number of kinds."""
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


def _decision_state(approval: ApprovalRequest | None, kind: str) -> DecisionState:
    if approval is None or approval.status == ApprovalStatus.PENDING:
        return None
    if kind == ApprovalKind.RECONCILE and approval.status == ApprovalStatus.CANCELLED:
        return None  # nobody answered: it waits (a retry raises a new one), never settles by itself
    if approval.status in (ApprovalStatus.EXPIRED, ApprovalStatus.CANCELLED):
        # No reviewer said no: the model must not read this as a rejection.
        if approval.status == ApprovalStatus.EXPIRED:
            return Rejected(
                "No human decision in time: the request expired before any reviewer decided.", undecided=True
            )
        return Rejected(
            "No human decision: the request was cancelled before any reviewer decided.", undecided=True
        )
    decision = approval.decision
    if decision is None:  # settled with no decision row: nothing authorises it
        return Rejected(f"the request was {approval.status} without a decision")
    if approval.status == ApprovalStatus.REJECTED:
        # The loop checks the reason against the signed decision before the model reads it.
        return Rejected(decision.reason, decision=signed_decision(decision))
    if decision.verdict == Verdict.CONFIRM:
        return Reconciled()
    # Under a quorum, the other votes travel with it: the gate verifies and counts them all.
    others = tuple(signed_decision(d) for d in approval.approving_decisions() if d.pk != decision.pk)
    return replace(signed_decision(decision), co_decisions=others)


def _deciders(approval: ApprovalRequest, run: Run, group_names: dict[Any, set[str]]) -> RequestDeciders:
    """Whether each reviewer who decided `approval` qualifies now, by the one rule
    (`may_decide`), with the group names read with their decisions."""
    reviewers = {d.reviewer_id: d.reviewer for d in approval.decisions.all()}
    return RequestDeciders(
        run_id=str(run.pk),
        request_id=str(approval.pk),
        answers={
            user.get_username(): may_decide(user, approval, run, group_names=group_names[pk])
            for pk, user in reviewers.items()
        },
    )


def signed_decision(decision: Decision) -> SignedDecision:
    """A stored decision as the gate verifies it."""
    return SignedDecision(
        decision_id=str(decision.id),
        verdict=decision.verdict,
        arguments=decision.arguments,
        payload=decision.payload,
        signature=decision.signature,
        key_id=decision.key_id,
        answer=decision.answer,
    )


def reviewer_notes_for(*, run_id: Any, call_ids: list[str], gate: ApprovalGate) -> list[str]:
    """Reviewers' steering notes on these calls, oldest first, as the model will read them.

    Each note is checked against its signed decision first: a note edited in the database
    raises DecisionRefused and never reaches the model."""
    notes = []
    for d in _decisions_with_notes(run_id, call_ids):
        binding = CallBinding(
            str(run_id), str(d.request.checkpoint_id), d.request.tool_call_id, d.request.tool
        )
        gate.verify_texts(signed_decision(d), binding, note=d.note)
        notes.append(
            f"[Review Desk] Note from reviewer {d.reviewer.get_username()} on {d.request.tool} "
            f"({d.request.tool_call_id}): {d.note}"
        )
    return notes


def _decisions_with_notes(run_id: Any, call_ids: list[str]) -> list[Decision]:
    """The decisions with a note on any request of these calls, oldest first, each with its
    request and reviewer: one hand-written statement (every resume asks; issue 11)."""
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


def calls_decided_meanwhile(*, run: Run, call_ids: tuple[str, ...]) -> bool:
    """Whether any waiting call's current request (its latest live one) was answered already."""
    latest: dict[str, str] = {}
    requests = ApprovalRequest.objects.filter(run=run, tool_call_id__in=call_ids).exclude(
        status=ApprovalStatus.CANCELLED
    )
    for tool_call_id, status in requests.order_by("created_at").values_list("tool_call_id", "status"):
        latest[tool_call_id] = status
    return any(status != ApprovalStatus.PENDING for status in latest.values())


def refused_decision_of(*, run_id: Any, call_id: str | None) -> dict[str, str]:
    """What a `decision.refused` audit row names besides the call, so that an admin can follow
    it (and the audit page checks that decision's signature beside the refusal): the call's
    latest decided request (`approval`), the decision that settled it (`decision`, the one the
    gate was handed; under a quorum its co-votes were checked with it) and that decision's
    arguments hash as stored now. Empty when the refusal names no call (a reviewer's note
    refused for the batch) or the call has no decision."""
    if not call_id:
        return {}
    latest = (
        Decision.objects.filter(request__run_id=run_id, request__tool_call_id=call_id)
        .order_by("-request__created_at", "-decided_at")
        .values_list("id", "request_id", "arguments_sha256")
        .first()
    )
    if latest is None:
        return {}
    decision_id, request_id, arguments_sha256 = latest
    return {"decision": str(decision_id), "approval": str(request_id), "arguments_sha256": arguments_sha256}
