"""Deciding an approval: `approval_check_decide` authorises and validates under lock,
`approval_do_decide` signs, stores, audits and emits; `approval_decide` does both.
`decision_consume` is the gate's half: a decision authorises one execution.

Raising, cancelling, raising again and expiring requests are in `lifecycle.py`."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Prefetch, prefetch_related_objects
from django.utils import timezone

from agents.canonical import canonical_json
from agents.questions import answer_problem
from agents.registry import get_agent
from agents.state import AgentState, CallStatus
from agents.tools import Tool
from reviewdesk.accounts.roles import group_names_of, is_reviewer
from reviewdesk.approvals import signing
from reviewdesk.approvals.device import (
    DeviceSignature,
    device_decision_required,
    device_key_for_signing,
    device_payload_fields,
    device_signature_check,
)
from reviewdesk.approvals.grants import grant_check_input, grant_do_create
from reviewdesk.approvals.models import (
    ApprovalKind,
    ApprovalRequest,
    ApprovalStatus,
    Decision,
    Verdict,
)
from reviewdesk.approvals.payloads import decision_not_after, decision_payload_for
from reviewdesk.approvals.routing import approval_audience, user_qualifies
from reviewdesk.approvals.selectors import approval_get_for_reviewer
from reviewdesk.approvals.validation import decision_input_check
from reviewdesk.audit.services import audit_record
from reviewdesk.errors import Conflict, Forbidden, Gone, Invalid
from reviewdesk.events.builders import approval_data
from reviewdesk.events.services import event_emit
from reviewdesk.runs.models import ENDED, Checkpoint, EffectStatus, Run, RunStatus, SideEffect
from reviewdesk.runs.transitions import RESUME_TASK, enqueue_on_commit, run_requeue

# The verdicts whose signature the gate checks before a tool runs (it refuses a server
# signature on them where device keys are required; an answer becomes the call's result);
# a rejection or a confirmation runs nothing.
SIGNER_CHECKED_VERDICTS = (Verdict.APPROVE, Verdict.EDIT, Verdict.RERUN, Verdict.ANSWER)


def approval_check_decide(
    *,
    approval_id: Any,
    reviewer: Any,
    verdict: str,
    arguments: Any,
    checkpoint_id: str,
    reason: str = "",
    note: str = "",
    external_ref: str = "",
    answer: Any = None,
) -> tuple[ApprovalRequest, Run]:
    """Authorise and validate a decision; return the approval and its run, both locked.

    Lock precondition: call inside transaction.atomic(). Locks the run row, then
    the approval row (always in that order, as the worker does), so a decision
    and a worker's step on the same run serialise.
    """
    # The reviewer's groups, read once for the role, the visibility and the rule below.
    group_names = group_names_of(reviewer)
    if not is_reviewer(reviewer, group_names=group_names):
        raise Forbidden("only reviewers can decide approvals")
    # Visible to them (or NotFound): the row alone, locked and read again just below.
    approval = approval_get_for_reviewer(
        approval_id=approval_id, user=reviewer, group_names=group_names, related=False
    )
    run = Run.objects.select_for_update().get(pk=approval.run_id)
    approval = ApprovalRequest.objects.select_for_update().get(pk=approval.pk)
    if reviewer.pk == run.submitted_by_id:
        raise Forbidden("you submitted this run; another reviewer must decide its approvals")
    if not user_qualifies(reviewer, approval, run, group_names=group_names):
        raise Forbidden("this approval is assigned to another reviewer or group")
    decision_input_check(
        kind=approval.kind,
        verdict=verdict,
        reason=reason,
        note=note,
        external_ref=external_ref,
        arguments=arguments,
        answer=answer,
    )
    if approval.status == ApprovalStatus.EXPIRED or (
        approval.status == ApprovalStatus.PENDING and approval.expires_at <= timezone.now()
    ):
        raise Gone("this approval has expired", code="expired")
    if approval.status not in (ApprovalStatus.PENDING, ApprovalStatus.CANCELLED):
        # Decided first: say so even when its run has ended since (it ran on that decision).
        raise Conflict(f"this approval was already {approval.status}", code="decided")
    if approval.status == ApprovalStatus.CANCELLED or run.status in ENDED:
        raise Conflict("this approval was cancelled with its run", code="cancelled")
    if str(checkpoint_id) != str(approval.checkpoint_id) or not _call_is_awaiting(run, approval):
        raise Conflict(
            "stale page: the approval was raised at another checkpoint or is no longer part of "
            "the run's open batch; reload and decide again",
            code="stale",
        )
    if approval.required_approvals > 1:
        _check_quorum_vote(approval, reviewer, verdict)
    if verdict == Verdict.EDIT:
        _check_edit(run, approval, arguments)
    if verdict == Verdict.RERUN:
        _check_stale_attempt_is_over(run, approval)
    if verdict == Verdict.ANSWER:
        _check_answer(approval, answer)
    return approval, run


def _check_answer(approval: ApprovalRequest, answer: Any) -> None:
    problem = answer_problem(approval.arguments, answer)
    if problem is not None:
        raise Invalid(problem, code="invalid_answer")
    try:
        canonical_json(answer)
    except ValueError as exc:
        raise Invalid(
            f"the answer cannot be canonicalised (RFC 8785): {exc}", code="invalid_answer"
        ) from None


def _check_quorum_vote(approval: ApprovalRequest, reviewer: Any, verdict: str) -> None:
    """Under a quorum, each reviewer votes once, and only for the arguments as raised: an edit
    would leave the votes already cast approving other arguments, so it is refused (reject
    with a reason instead, and let the agent call again)."""
    if approval.decisions.filter(reviewer=reviewer).exists():
        raise Conflict(
            "you have already voted on this approval; another reviewer must add theirs", code="voted"
        )
    if verdict == Verdict.EDIT:
        raise Invalid(
            f"this call needs {approval.required_approvals} approvals: it cannot be edited; "
            "reject it with a reason instead",
            code="verdict",
        )


def _check_stale_attempt_is_over(run: Run, approval: ApprovalRequest) -> None:
    """A re-run is authorised only once the attempt that left the effect unknown can no longer act.

    That attempt may be frozen, not dead, and could still perform the effect when it wakes.
    Celery's prefork pool kills a task CELERY_TASK_TIME_LIMIT after it started, and the attempt
    was created inside its task, so once that long has passed since the attempt started, its
    process is gone. (Clocks of web and worker hosts are assumed in step; a row with no
    attempt counts from its last change, which is later than any attempt that wrote it.)
    """
    effect = (
        SideEffect.objects.filter(idempotency_key=f"{run.pk}:{approval.tool_call_id}")
        .select_related("attempt")
        .first()
    )
    if effect is None:
        return
    since = effect.attempt.started_at if effect.attempt is not None else effect.updated_at
    possible_at = since + timedelta(seconds=settings.CELERY_TASK_TIME_LIMIT)
    if timezone.now() < possible_at:
        raise Conflict(
            f"the attempt that started this effect may still be running until {possible_at.isoformat()} "
            f"(its task's hard time limit, {settings.CELERY_TASK_TIME_LIMIT}s); a re-run can be signed "
            "from then on. If the effect did happen, mark it done now.",
            code="rerun_too_early",
            errors={"possible_at": possible_at.isoformat()},
        )


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


def _tool_of(run: Run, approval: ApprovalRequest) -> Tool:
    tool = get_agent(run.agent).tool(approval.tool)
    if tool is None:  # the agent was redeployed without it: nothing can run this call
        raise Conflict(f"the agent {run.agent!r} has no tool {approval.tool!r} any more", code="stale")
    return tool


def _check_edit(run: Run, approval: ApprovalRequest, arguments: Any) -> None:
    tool = _tool_of(run, approval)
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
    reviewer: Any,
    verdict: str,
    reason: str,
    arguments: Any,
    note: str = "",
    external_ref: str = "",
    device: DeviceSignature | None = None,
    answer: Any = None,
) -> Decision:
    """Sign and store the decision, audit it, emit events, enqueue resume on commit. With
    `device`, the reviewer's device signed it: checked here, stored as signed (422 if bad).

    Lock precondition: `approval` and `run` were locked by approval_check_decide
    in the current transaction.
    """
    now = timezone.now()
    to_run = arguments if verdict == Verdict.EDIT else approval.arguments
    texts = {"reason": reason, "note": note, "external_ref": external_ref.strip()}
    if device is None:
        if verdict in SIGNER_CHECKED_VERDICTS and device_decision_required(
            agent=run.agent, tool=approval.tool
        ):
            raise Invalid(
                f"{approval.tool} runs only on a decision signed by your own device key (/keys/)",
                code="device_signature_required",
            )
        decision_id, issued_at, nonce, key_id = uuid.uuid4(), now, None, signing.current_key_id()
    else:
        key = device_key_for_signing(reviewer=reviewer, key_id=device.key_id)
        decision_id, issued_at, nonce = device_payload_fields(device.payload, now=now)
        key_id = key.key_id
    payload = decision_payload_for(
        approval=approval,
        run=run,
        reviewer=reviewer,
        verdict=verdict,
        to_run=to_run,
        texts=texts,
        decision_id=decision_id,
        issued_at=issued_at,
        nonce=nonce,
        key_id=key_id,
        device=device is not None,
        answer=answer,
    )
    if device is None:
        signature = signing.sign(payload)
    else:
        device_signature_check(key=key, device=device, expected=payload)
        signature = device.signature
    decision = Decision.objects.create(
        id=decision_id,
        request=approval,
        verdict=verdict,
        **texts,
        reviewer=reviewer,
        arguments=to_run,
        arguments_sha256=payload["arguments_sha256"],
        decided_at=now,
        not_after=decision_not_after(approval, issued_at),
        nonce=payload["nonce"],
        payload=payload,
        signature=signature,
        key_id=key_id,
        answer=answer,
    )
    # Every vote with its reviewer in one read (this one included): the count below and the
    # event's decision and quorum use them; the event reads the run locked above.
    approval.run = run
    prefetch_related_objects(
        [approval], Prefetch("decisions", queryset=Decision.objects.select_related("reviewer"))
    )
    votes = len(approval.approving_decisions())
    # Any rejection (and any answer to a reconciliation) settles it; an approval waits for its quorum.
    settled = verdict not in (Verdict.APPROVE, Verdict.EDIT) or votes >= approval.required_approvals
    if settled:
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
            "signer": "device" if device is not None else "server",
            "key_id": key_id,
            "answer_sha256": payload["answer_sha256"],
            # The policy is asked again for an edited call; the reviewer's edit approves it either way.
            "policy_requires_approval": _tool_of(run, approval).needs_approval(to_run),
            "approvals": votes,
            "required_approvals": approval.required_approvals,
        },
    )
    event_emit(
        type="approval.updated",
        data=approval_data(approval),
        run_id=run.pk,
        audience=approval_audience(approval),
    )
    if not settled:
        return decision  # "1 of 2": nothing to resume until the quorum is reached
    if run.status == RunStatus.INPUT_REQUIRED:
        run_requeue(run)
    else:
        # A worker still holds the run: it sees this decision when it finishes
        # (runs.execution.run_finish) and requeues. The nudge is harmless: the task is idempotent.
        enqueue_on_commit(RESUME_TASK, run)
    return decision


def _record_reconciled_effect(run: Run, approval: ApprovalRequest, decision: Decision) -> None:
    """The reviewer says the interrupted effect did happen: the ledger row becomes confirmed
    with what they recorded, and the run reuses that result instead of running the tool."""
    SideEffect.objects.filter(
        idempotency_key=f"{run.pk}:{approval.tool_call_id}", status=EffectStatus.UNKNOWN
    ).update(
        status=EffectStatus.CONFIRMED,
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
    approval_id: Any,
    reviewer: Any,
    verdict: str,
    reason: str = "",
    note: str = "",
    arguments: Any = None,
    external_ref: str = "",
    checkpoint_id: str,
    device: DeviceSignature | None = None,
    answer: Any = None,
    grant: Any = None,
) -> Decision:
    """Decide, and with an approve optionally grant ahead of time (`grant`, approvals.grants):
    the grant is checked with the decision and stored in the same transaction, or neither is."""
    with transaction.atomic():
        approval, run = approval_check_decide(
            approval_id=approval_id,
            reviewer=reviewer,
            verdict=verdict,
            arguments=arguments,
            checkpoint_id=checkpoint_id,
            reason=reason,
            note=note,
            external_ref=external_ref,
            answer=answer,
        )
        spec = None
        if grant is not None:
            tool = _tool_of(run, approval)
            spec = grant_check_input(
                grant=grant, approval=approval, reviewer=reviewer, verdict=verdict, tool=tool
            )
        decision = approval_do_decide(
            approval=approval,
            run=run,
            reviewer=reviewer,
            verdict=verdict,
            reason=reason,
            note=note,
            arguments=arguments,
            external_ref=external_ref,
            device=device,
            answer=answer,
        )
        if spec is not None:
            grant_do_create(spec=spec, decision=decision, run=run, reviewer=reviewer)
        return decision


def decision_consume(*, decision_id: str) -> bool:
    """Mark the decision used, once: False when it already was (a replay). The gate calls
    this in the same transaction as the ledger row it authorises."""
    return (
        Decision.objects.filter(pk=decision_id, consumed_at__isnull=True).update(consumed_at=timezone.now())
        == 1
    )
