"""Reads about approvals: who may see and decide them, and what the worker needs to resume."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.db import connection
from django.db.models import Q, QuerySet

from agents.gate import ApprovalGate, CallBinding, SignedDecision
from agents.loop import DecisionState, Reconciled, Rejected
from agents.registry import UnknownAgent, get_agent
from agents.state import CallState, CallStatus
from agents.tools import Effect, Tool, ToolContext
from reviewdesk.accounts.roles import is_admin, is_reviewer
from reviewdesk.accounts.targets import targets_of
from reviewdesk.approvals.models import (
    AWAITING_KINDS,
    ApprovalKind,
    ApprovalRequest,
    ApprovalStatus,
    Decision,
    Verdict,
)
from reviewdesk.approvals.routing import user_qualifies
from reviewdesk.db import NamesAny, prefetched_as
from reviewdesk.db_rows import Columns, column, fetchall, fetchone, prep, table
from reviewdesk.errors import NotFound
from reviewdesk.runs.models import Run
from reviewdesk.tool_world import sandbox_config, tool_world

logger = logging.getLogger(__name__)


def approvals_visible_to(
    user: Any, *, group_names: set[str] | None = None, related: bool = True, **lookups: Any
) -> QuerySet[ApprovalRequest]:
    """Admins see every approval; a reviewer those open to any reviewer or assigned to them.

    `lookups` narrow the rows (status="pending", pk=...); the assignment check is a condition
    on each row (NamesAny), so a page reads no more rows than its own and those it skips.
    `group_names`: the user's groups, when the caller read them already. `related=False`: the
    rows alone, without the run, the people and the decisions that a page shows."""
    approvals = ApprovalRequest.objects.filter(**lookups)
    if related:
        approvals = approvals.select_related("run", "run__submitted_by", "handed_over_by").prefetch_related(
            "decisions__reviewer"
        )
    if is_admin(user):
        return approvals
    if not is_reviewer(user, group_names=group_names):
        return approvals.none()
    mine = targets_of(user, group_names=group_names)
    return approvals.filter(Q(assignees=[]) | NamesAny("assignees", mine))


def approval_visible_to(user: Any, approval: ApprovalRequest, *, group_names: set[str] | None = None) -> bool:
    """`approvals_visible_to`'s rule on one row already read: admins see every approval, a
    reviewer those open to any reviewer or naming them or a group of theirs (a decision checks
    it on the row it has locked, instead of reading it once more; issue 11)."""
    if is_admin(user):
        return True
    if not is_reviewer(user, group_names=group_names):
        return False
    return not approval.assignees or bool(set(approval.assignees) & targets_of(user, group_names=group_names))


def approvals_pending_for(user: Any) -> QuerySet[ApprovalRequest]:
    """Pending and waiting for this user: not those whose quorum already has their vote. The
    rows alone: the queue reads a page's relations for its window (events.builders.approval_rows)."""
    pending = approvals_visible_to(user, related=False, status=ApprovalStatus.PENDING)
    return pending.exclude(decisions__reviewer=user).order_by("created_at")


def approval_get_for_reviewer(
    *, approval_id: Any, user: Any, group_names: set[str] | None = None, related: bool = True
) -> ApprovalRequest:
    """The approval, or NotFound whether it is missing or not the user's to see.
    `group_names` and `related` as for `approvals_visible_to`."""
    try:
        approval = approvals_visible_to(
            user, group_names=group_names, related=related, pk=approval_id
        ).first()
    except (ValueError, TypeError, ValidationError):
        approval = None
    if approval is None:
        raise NotFound("no such approval")
    return approval


def user_may_decide(user: Any, run: Run) -> bool:
    """A reviewer may act on a run (cancel it, see it as theirs) unless they submitted it or it
    is assigned elsewhere. Deciding one request asks `user_qualifies` (approvals.routing)."""
    if not is_reviewer(user) or user.pk == run.submitted_by_id:
        return False
    return not run.reviewers or user.get_username() in run.reviewers


def user_may_decide_approval(user: Any, approval: ApprovalRequest) -> bool:
    """May `user` decide this request now: the one rule (approvals/routing.py), which also
    admits the reviewers an escalation added to its targets (approvals/clock.py)."""
    return user_qualifies(user, approval, approval.run)


def reviewer_may_decide_run(username: str, run_id: str, request_id: str) -> bool:
    """The gate's check that the signing reviewer still qualifies for the request, at execution
    time: a reviewer, not the submitter, named by the request's current targets. (The worker
    answers it first from the rows it read with the call's decisions: `RequestDeciders`.)"""
    user = get_user_model().objects.filter(username=username).first()
    try:
        approval = ApprovalRequest.objects.select_related("run").filter(pk=request_id, run_id=run_id).first()
    except (ValueError, ValidationError):
        approval = None
    return user is not None and approval is not None and user_qualifies(user, approval, approval.run)


# --- what the worker reads at execution time -------------------------------------------


@dataclass
class RequestDeciders:
    """The gate's reviewer check (`reviewer_may_decide_run`) for the reviewers who decided one
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
    0.2 ms on the wire (issue 11, #2). The models are those the ORM builds (reviewdesk/db_rows.py)."""
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
    (`user_qualifies`), with the group names read with their decisions."""
    reviewers = {d.reviewer_id: d.reviewer for d in approval.decisions.all()}
    return RequestDeciders(
        run_id=str(run.pk),
        request_id=str(approval.pk),
        answers={
            user.get_username(): user_qualifies(user, approval, run, group_names=group_names[pk])
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


# --- what a reviewer reads before deciding (the desk's pages) ---------------------------

# A message or result longer than this is folded on the page (<details>), open on request.
FOLD_CHARS = 600
FOLD_LINES = 12


def _pretty_json_text(text: Any) -> str:
    """JSON that arrives as text (a tool call's arguments, a tool's result), re-indented."""
    if not isinstance(text, str):
        return json.dumps(text, indent=2, ensure_ascii=False)
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except ValueError:
        return text


def _long(text: str) -> bool:
    return len(text) > FOLD_CHARS or text.count("\n") >= FOLD_LINES


def _chat_entry(body: dict[str, Any], tool_call_id: str) -> dict[str, Any]:
    """One chat message as the page shows it: who spoke, their text, the calls they made."""
    role = str(body.get("role", ""))
    content = body.get("content")
    text = content if isinstance(content, str) else ("" if content is None else json.dumps(content))
    result_of = body.get("tool_call_id")
    calls = [
        {
            "id": call.get("id", ""),
            "name": (call.get("function") or {}).get("name", ""),
            "arguments": _pretty_json_text((call.get("function") or {}).get("arguments", "")),
            "this_call": call.get("id") == tool_call_id,
        }
        for call in body.get("tool_calls") or []
        if isinstance(call, dict)
    ]
    if result_of:
        text = _pretty_json_text(text)
    return {
        "role": role,
        "model_text": role == "assistant",  # written by the model: untrusted
        "text": text,
        "long": _long(text),
        "result_of": result_of,
        "tool_calls": calls,
        "asks_for_this_call": any(c["this_call"] for c in calls),
    }


def approval_tool(approval: ApprovalRequest) -> Tool | None:
    """The declared tool this approval is for, or None when its agent or tool is gone."""
    try:
        return get_agent(approval.run.agent).tool(approval.tool)
    except UnknownAgent:
        return None


def approval_context(approval: ApprovalRequest) -> dict[str, Any]:
    """Everything a reviewer needs to judge one approval, in the order they think about it:
    what it is (agent, submitter, task, tool), why the agent asks (the conversation so far
    and the model's message that made the call), and what was decided before in this run."""
    run = approval.run
    tool = approval_tool(approval)
    bodies = (
        run.messages.filter(superseded_at__isnull=True).order_by("position").values_list("body", flat=True)
    )
    conversation = [_chat_entry(body, approval.tool_call_id) for body in bodies if isinstance(body, dict)]
    asking = next((m for m in reversed(conversation) if m["asks_for_this_call"]), None)
    earlier = (
        ApprovalRequest.objects.filter(run_id=run.pk)
        .exclude(pk=approval.pk)
        .prefetch_related("decisions__reviewer")
        .order_by("created_at")
    )
    return {
        "agent": run.agent,
        "submitter": run.submitted_by.get_username(),
        "task": run.input,
        "run_status": run.status,
        "tool_description": tool.description if tool else "(this tool is no longer declared)",
        "effect": str(tool.effect) if tool else "",
        "irreversible": bool(tool and tool.effect == Effect.EXTERNAL),
        "policy_reason": approval.reason,
        "conversation": conversation,
        "asking_text": asking["text"] if asking else "",
        "decisions": [
            {
                "id": str(a.pk),
                "tool": a.tool,
                "kind": a.kind,
                "status": a.status,
                "verdict": a.decision.verdict if a.decision else None,
                "reviewer": a.decision.reviewer.get_username() if a.decision else None,
                "reason": a.decision.reason if a.decision else "",
                "decided_at": a.decision.decided_at if a.decision else None,
            }
            for a in earlier
        ],
    }


def approval_preview(approval: ApprovalRequest, arguments: Any) -> dict[str, Any]:
    """What the call would do with `arguments`: {"preview": {...} or None, "errors": [...]}.

    Arguments that break the tool's schema get errors and no preview. The preview runs
    in the context the call would run in (its world, working directory, time limit), and
    only reads: a preview that fails says so instead of failing the page.
    """
    tool = approval_tool(approval)
    if tool is None:
        return {"preview": None, "errors": ["this tool is no longer declared"]}
    errors = tool.validation_errors(arguments)
    if errors:
        return {"preview": None, "errors": errors}
    if tool.preview is None:
        return {"preview": None, "errors": []}
    run_id = str(approval.run_id)
    ctx = ToolContext(
        run_id=run_id,
        tool_call_id=approval.tool_call_id,
        idempotency_key=CallBinding(run_id, None, approval.tool_call_id, approval.tool).idempotency_key,
        workdir=settings.DESK_RUNS_DIR / run_id,
        world=tool_world(),
        timeout_seconds=settings.DESK_EXECUTE_TIMEOUT_SECONDS,
        sandbox=sandbox_config(),
    )
    try:
        preview = tool.preview(arguments, ctx)
    except Exception:  # a tool author's code: the page must still show the arguments
        logger.exception("preview of %s failed", approval.tool)
        return {"preview": None, "errors": ["the preview failed; judge by the arguments"]}
    return {"preview": preview, "errors": []}
