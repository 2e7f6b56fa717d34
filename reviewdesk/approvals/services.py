"""Deciding an approval: `approval_check_decide` authorises and validates under lock,
`approval_do_decide` signs, stores, audits and emits; `approval_decide` does both."""

from __future__ import annotations

import secrets
import uuid
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agents.canonical import canonical_json, sha256_hex
from agents.registry import get_agent
from agents.state import AgentState, CallStatus
from reviewdesk.accounts.roles import is_reviewer
from reviewdesk.approvals import signing
from reviewdesk.approvals.models import (
    KIND_VERDICTS,
    ApprovalKind,
    ApprovalRequest,
    ApprovalStatus,
    Decision,
    Verdict,
)
from reviewdesk.approvals.selectors import approval_get_for_reviewer, user_may_decide
from reviewdesk.audit.services import audit_record
from reviewdesk.errors import Conflict, Forbidden, Gone, Invalid
from reviewdesk.events.builders import approval_data, iso, run_data
from reviewdesk.events.services import event_emit
from reviewdesk.runs.models import ENDED, Checkpoint, Run, RunStatus, SideEffect
from reviewdesk.runs.selectors import run_audience


def approval_check_decide(
    *,
    approval_id,
    reviewer,
    verdict: str,
    arguments: Any,
    checkpoint_id: str,
    external_ref: str = "",
) -> tuple[ApprovalRequest, Run]:
    """Authorise and validate a decision; return the approval and its run, both locked.

    Lock precondition: call inside transaction.atomic(). Locks the run row, then
    the approval row (always in that order, as the worker does), so a decision
    and a worker's step on the same run serialise.
    """
    if not is_reviewer(reviewer):
        raise Forbidden("only reviewers can decide approvals")
    approval = approval_get_for_reviewer(approval_id=approval_id, user=reviewer)
    run = Run.objects.select_for_update().get(pk=approval.run_id)
    approval = ApprovalRequest.objects.select_for_update().get(pk=approval.pk)
    if reviewer.pk == run.submitted_by_id:
        raise Forbidden("you submitted this run; another reviewer must decide its approvals")
    if not user_may_decide(reviewer, run):
        raise Forbidden("this approval is assigned to another reviewer")
    allowed = KIND_VERDICTS[approval.kind]
    if verdict not in allowed:
        raise Invalid(f"a {approval.kind} request is answered with {', '.join(allowed)}", code="verdict")
    if verdict == Verdict.CONFIRM and not external_ref.strip():
        raise Invalid("marking an effect done needs its external reference (where it is recorded)")
    if approval.status == ApprovalStatus.EXPIRED or (
        approval.status == ApprovalStatus.PENDING and approval.expires_at <= timezone.now()
    ):
        raise Gone("this approval has expired", code="expired")
    if approval.status == ApprovalStatus.CANCELLED or run.status in ENDED:
        raise Conflict("this approval was cancelled with its run", code="cancelled")
    if approval.status != ApprovalStatus.PENDING:
        raise Conflict(f"this approval was already {approval.status}", code="decided")
    if str(checkpoint_id) != str(approval.checkpoint_id) or not _call_is_awaiting(run, approval):
        raise Conflict(
            "stale page: the approval was raised at another checkpoint or is no longer part of "
            "the run's open batch; reload and decide again",
            code="stale",
        )
    if verdict == Verdict.EDIT:
        _check_edit(run, approval, arguments)
    return approval, run


def _call_is_awaiting(run: Run, approval: ApprovalRequest) -> bool:
    """The approval's call is still waiting in the run's latest checkpoint (its open batch).

    A sibling's resume writes new checkpoints but leaves this call awaiting, so
    it does not make the page stale; a finished or abandoned batch does.
    """
    latest = Checkpoint.objects.filter(run=run).order_by("-number").values_list("snapshot", flat=True).first()
    if latest is None:
        return False
    waiting = CallStatus.UNKNOWN if approval.kind == ApprovalKind.RECONCILE else CallStatus.AWAITING
    return any(
        call.id == approval.tool_call_id and call.status == waiting
        for call in AgentState.from_snapshot(latest).batch
    )


def _check_edit(run: Run, approval: ApprovalRequest, arguments: Any) -> None:
    tool = get_agent(run.agent).tool(approval.tool)
    if not isinstance(arguments, dict):
        raise Invalid("an edit needs the changed arguments as a JSON object")
    errors = tool.validation_errors(arguments)
    if errors:
        raise Invalid("the edited arguments do not match the tool's schema", errors=errors)
    try:
        canonical_json(arguments)
    except ValueError as exc:
        raise Invalid(f"the edited arguments cannot be canonicalised (RFC 8785): {exc}") from None


def approval_do_decide(
    *,
    approval: ApprovalRequest,
    run: Run,
    reviewer,
    verdict: str,
    reason: str,
    arguments: Any,
    note: str = "",
    external_ref: str = "",
) -> Decision:
    """Sign and store the decision, audit it, emit events, enqueue resume on commit.

    Lock precondition: `approval` and `run` were locked by approval_check_decide
    in the current transaction.
    """
    now = timezone.now()
    to_run = arguments if verdict == Verdict.EDIT else approval.arguments
    decision_id = uuid.uuid4()
    key_id = signing.current_key_id()
    payload = {
        "decision_id": str(decision_id),
        "request_id": str(approval.id),
        "run_id": str(run.id),
        "attempt": approval.attempt.number if approval.attempt else None,
        "checkpoint_id": str(approval.checkpoint_id),
        "tool_call_id": approval.tool_call_id,
        "tool": approval.tool,
        "arguments_sha256": sha256_hex(to_run),
        "verdict": verdict,
        "reviewer": reviewer.get_username(),
        "issued_at": iso(now),
        "not_after": iso(now + timedelta(seconds=settings.DESK_DECISION_VALID_SECONDS)),
        "nonce": secrets.token_hex(16),
        "key_id": key_id,
    }
    decision = Decision.objects.create(
        id=decision_id,
        request=approval,
        verdict=verdict,
        reason=reason,
        note=note,
        external_ref=external_ref.strip(),
        reviewer=reviewer,
        arguments=to_run,
        arguments_sha256=payload["arguments_sha256"],
        decided_at=now,
        not_after=now + timedelta(seconds=settings.DESK_DECISION_VALID_SECONDS),
        nonce=payload["nonce"],
        payload=payload,
        signature=signing.sign(payload),
        key_id=key_id,
    )
    approval.status = ApprovalStatus.REJECTED if verdict == Verdict.REJECT else ApprovalStatus.APPROVED
    approval.save(update_fields=["status", "updated_at"])
    if verdict == Verdict.CONFIRM:
        _record_reconciled_effect(run, approval, decision)
    audit_record(
        actor=reviewer,
        action=f"decision.{verdict}",
        subject_type="approval",
        subject_id=approval.id,
        data={
            "decision": str(decision.id),
            "run": str(run.id),
            "tool": approval.tool,
            "arguments_sha256": payload["arguments_sha256"],
            "original_arguments_sha256": approval.arguments_sha256,
            "reason": reason,
            "note": note,
            # The policy is asked again for an edited call; the reviewer's edit approves it either way.
            "policy_requires_approval": get_agent(run.agent).tool(approval.tool).needs_approval(to_run),
        },
    )
    audience = run_audience(run)
    event_emit(type="approval.updated", data=approval_data(approval), run_id=run.pk, audience=audience)
    if run.status == RunStatus.INPUT_REQUIRED:
        run.status = RunStatus.QUEUED
        run.revision += 1
        run.save(update_fields=["status", "revision", "updated_at"])
        event_emit(type="run.updated", data=run_data(run), run_id=run.pk, audience=audience)
    # If a worker still holds the run, it sees this decision when it finishes
    # (runs.services.run_finish) and requeues; the task itself is idempotent.
    from reviewdesk.runs.tasks import resume

    run_id = str(run.id)
    transaction.on_commit(lambda: resume.delay(run_id), robust=True)
    return decision


def _record_reconciled_effect(run: Run, approval: ApprovalRequest, decision: Decision) -> None:
    """The reviewer says the interrupted effect did happen: the ledger row becomes confirmed
    with what they recorded, and the run reuses that result instead of running the tool."""
    SideEffect.objects.filter(
        idempotency_key=f"{run.pk}:{approval.tool_call_id}", status=SideEffect.Status.UNKNOWN
    ).update(
        status=SideEffect.Status.CONFIRMED,
        external_ref=decision.external_ref,
        result={
            "reconciled": True,
            "external_ref": decision.external_ref,
            "by": decision.reviewer.get_username(),
        },
        updated_at=decision.decided_at,
    )


def approval_decide(
    *,
    approval_id,
    reviewer,
    verdict: str,
    reason: str = "",
    note: str = "",
    arguments: Any = None,
    external_ref: str = "",
    checkpoint_id: str,
) -> Decision:
    with transaction.atomic():
        approval, run = approval_check_decide(
            approval_id=approval_id,
            reviewer=reviewer,
            verdict=verdict,
            arguments=arguments,
            checkpoint_id=checkpoint_id,
            external_ref=external_ref,
        )
        return approval_do_decide(
            approval=approval,
            run=run,
            reviewer=reviewer,
            verdict=verdict,
            reason=reason,
            note=note,
            arguments=arguments,
            external_ref=external_ref,
        )
