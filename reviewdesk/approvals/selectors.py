"""Reads about approvals: who may see and decide them, and what the worker needs to resume."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db.models import Q, QuerySet, Subquery

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
    approval = _latest_request_with_decisions(run, call, kinds)
    state = _decision_state(approval, kind)
    if approval is None or not isinstance(state, SignedDecision):
        return state, None  # nothing the gate runs on: no reviewer to check
    return state, _deciders(approval, run)


def _latest_request_with_decisions(
    run: Run, call: CallState, kinds: tuple[str, ...]
) -> ApprovalRequest | None:
    """The call's latest request of `kinds` (a retry may have raised a new one after a
    cancelled one), its decisions and their reviewers with it: one statement when it has
    decisions (read from their side, the request joined), two when it has none (issue 11, #2:
    a resume read the request, then its decisions)."""
    latest = ApprovalRequest.objects.filter(run_id=run.pk, tool_call_id=call.id, kind__in=kinds).order_by(
        "-created_at"
    )
    decisions = list(
        Decision.objects.filter(request_id=Subquery(latest.values("pk")[:1])).select_related(
            "request", "reviewer"
        )
    )
    if not decisions:
        return latest.first()
    approval = decisions[0].request
    for decision in decisions:
        decision.request = approval  # one request object, as a prefetch would leave them
    prefetched_as(approval, "decisions", decisions)
    return approval


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


def _deciders(approval: ApprovalRequest, run: Run) -> RequestDeciders:
    """Whether each reviewer who decided `approval` qualifies now, by the one rule
    (`user_qualifies`), with their groups read in one statement for all of them."""
    reviewers = {d.reviewer_id: d.reviewer for d in approval.decisions.all()}
    memberships = get_user_model().groups.through.objects.filter(user_id__in=reviewers)
    group_names: dict[Any, set[str]] = {pk: set() for pk in reviewers}
    for user_id, name in memberships.values_list("user_id", "group__name"):
        group_names[user_id].add(name)
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
    decisions = (
        Decision.objects.filter(request__run_id=run_id, request__tool_call_id__in=call_ids)
        .exclude(note="")
        .select_related("reviewer", "request")
        .order_by("decided_at")
    )
    notes = []
    for d in decisions:
        binding = CallBinding(
            str(run_id), str(d.request.checkpoint_id), d.request.tool_call_id, d.request.tool
        )
        gate.verify_texts(signed_decision(d), binding, note=d.note)
        notes.append(
            f"[Review Desk] Note from reviewer {d.reviewer.get_username()} on {d.request.tool} "
            f"({d.request.tool_call_id}): {d.note}"
        )
    return notes


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
