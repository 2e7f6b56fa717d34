"""What the worker reads of a call's decisions before it resumes: the latest request with its
decisions and who may decide it (one statement), the signed decision the gate verifies, the
reviewers' notes, and whether a call was decided meanwhile."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

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
from reviewdesk.approvals.rows import (
    decisions_with_notes,
    request_latest_with_decisions,
)
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
    with it, so the gate's check just after reads nothing again (`make bench` #2)."""
    kind = ApprovalKind.RECONCILE if call.status == CallStatus.UNKNOWN else ApprovalKind.TOOL_CALL
    kinds = (kind,) if kind == ApprovalKind.RECONCILE else AWAITING_KINDS
    approval, group_names = request_latest_with_decisions(run, call, kinds)
    state = _decision_state(approval, kind)
    if approval is None or not isinstance(state, SignedDecision):
        return state, None  # nothing the gate runs on: no reviewer to check
    return state, _deciders(approval, run, group_names)


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
    for d in decisions_with_notes(run_id, call_ids):
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
