"""Recording a decision: `approval_check_decide` (checks.py) authorises and validates under
lock, `approval_do_decide` signs, stores, audits and emits; `approval_decide` does both.
`decision_consume` is the gate's half: a decision authorises one execution.

Raising, cancelling, raising again and expiring requests are the request's life (`lifecycle/`)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from django.db.models import Prefetch, prefetch_related_objects
from django.utils import timezone

from reviewdesk.approvals import signing
from reviewdesk.approvals.access import approval_audience
from reviewdesk.approvals.deciding.checks import approval_check_decide, tool_still_deployed
from reviewdesk.approvals.deciding.device import (
    device_key_for_signing,
    device_payload_fields,
    device_signature_check,
)
from reviewdesk.approvals.deciding.input import DecisionInput, DeviceSignature
from reviewdesk.approvals.deciding.payload import decision_not_after, decision_payload_for
from reviewdesk.approvals.grants.create import (
    grant_check_input,
    grant_do_create,
    grant_target_of_external,
    grant_target_of_tool,
)
from reviewdesk.approvals.lifecycle.provenance import edited_provenance
from reviewdesk.approvals.models import (
    QUORUM_VERDICTS,
    ApprovalRequest,
    ApprovalStatus,
    Decision,
    Verdict,
)
from reviewdesk.approvals.reads.representation import approval_data
from reviewdesk.approvals.rows import approval_update, decision_insert, decision_mark_consumed
from reviewdesk.audit.services import audit_record
from reviewdesk.events.services import event_emit
from reviewdesk.lib.db import atomic_appends_last, prefetched_as
from reviewdesk.lib.errors import Invalid
from reviewdesk.runs.models import EffectStatus, Run, RunStatus, SideEffect
from reviewdesk.runs.transitions import (
    RESUME_TASK,
    enqueue_on_commit,
    run_external_waiting_update,
    run_requeue,
)

if TYPE_CHECKING:
    from django.contrib.auth.models import User

# The verdicts whose signature the gate checks before a tool runs (it refuses a server
# signature on them where device keys are required; an answer becomes the call's result);
# a rejection or a confirmation runs nothing.
SIGNER_CHECKED_VERDICTS = (Verdict.APPROVE, Verdict.EDIT, Verdict.RERUN, Verdict.ANSWER)


def approval_do_decide(
    *,
    approval: ApprovalRequest,
    run: Run,
    reviewer: User,
    decision: DecisionInput,
    via: dict[str, Any] | None = None,
) -> Decision:
    """Sign and store the decision, audit it, emit events, enqueue resume on commit. With
    `device`, the reviewer's device signed it: checked here, stored as signed (422 if bad).
    `via`: where the reviewer clicked, when not on the desk or the API (Slack: its user and
    the link it went through), written in the audit row; the signed payload is the same.

    Lock precondition: `approval` and `run` were locked by approval_check_decide
    in the current transaction.
    """
    now = timezone.now()
    verdict, device = decision.verdict, decision.device
    to_run = decision.arguments_to_run(approval)
    texts = decision.texts()
    if device is None:
        if verdict in SIGNER_CHECKED_VERDICTS and _device_decision_required(run, approval):
            raise Invalid(
                f"{approval.tool} runs only on a decision signed by your own device key (/keys/)",
                code="device_signature_required",
            )
        decision_id, issued_at, nonce, key_id = uuid.uuid4(), now, None, signing.current_key_id()
    else:
        key = device_key_for_signing(reviewer=reviewer, key_id=device.key_id)
        decision_id, issued_at, nonce = device_payload_fields(device.payload, now=now)
        if Decision.objects.filter(pk=decision_id).exists():
            # The server chose it in /payload, but the device signs what it sends: an id
            # already stored would collide on the primary key (a 500), not be a decision.
            raise Invalid(
                "the signed payload's decision id was used already: fetch the payload again",
                code="bad_signature",
            )
        key_id = key.key_id
    payload = decision_payload_for(
        approval=approval,
        run=run,
        reviewer=reviewer,
        decision=decision,
        decision_id=decision_id,
        issued_at=issued_at,
        nonce=nonce,
        key_id=key_id,
        device=device is not None,
    )
    if device is None:
        signature = signing.sign(payload)
    else:
        device_signature_check(key=key, device=device, expected=payload)
        signature = device.signature
    stored = Decision(
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
        answer=decision.answer,
        # What the reviewer was told (a model's advice) is kept with what they decided.
        reading=approval.reading,
        provenance=edited_provenance(
            approval.provenance, approval.arguments, to_run, reviewer=reviewer.username
        )
        if verdict == Verdict.EDIT
        else None,
    )
    decision_insert(stored)
    # Every vote with its reviewer in one read (this one included): the count below and the
    # event's decision and quorum use them; the event reads the run locked above.
    approval.run = run
    if approval.required_approvals == 1:
        # One reviewer's word settles the request, so a pending one has no earlier decision:
        # its votes are this one (no read).
        prefetched_as(approval, "decisions", [stored])
    else:
        prefetch_related_objects(
            [approval], Prefetch("decisions", queryset=Decision.objects.select_related("reviewer"))
        )
    votes = len(approval.approving_decisions())
    # Any rejection, answer or confirmation settles it; an approval or a re-run waits for its quorum.
    settled = verdict not in QUORUM_VERDICTS[approval.kind] or votes >= approval.required_approvals
    if settled:
        approval.status = ApprovalStatus.REJECTED if verdict == Verdict.REJECT else ApprovalStatus.APPROVED
    approval_update(approval, ["status", "updated_at"])
    if verdict == Verdict.CONFIRM:
        _record_reconciled_effect(run, approval, stored)
    audit_record(
        actor=reviewer,
        action=f"decision.{verdict}",
        subject_type="approval",
        subject_id=approval.id,
        data={
            "decision": str(stored.id),
            "run": str(run.id),
            "tool": approval.tool,
            "arguments_sha256": payload["arguments_sha256"],
            "original_arguments_sha256": approval.arguments_sha256,
            "reason": texts["reason"],
            "note": texts["note"],
            "signer": "device" if device is not None else "server",
            "key_id": key_id,
            "answer_sha256": payload["answer_sha256"],
            # The policy is asked again for an edited call; the reviewer's edit approves it either way.
            # An external call's policy is its framework's: it asked, so the desk has none to ask.
            "policy_requires_approval": None
            if run.is_external
            else tool_still_deployed(run, approval).needs_approval(to_run),
            "approvals": votes,
            "required_approvals": approval.required_approvals,
            # The second opinion the reviewer saw, if any: advice they were given, not a rule.
            "reading": approval.reading,
            **({"via": via} if via else {}),
        },
    )
    event_emit(
        type="approval.updated",
        data=approval_data(approval),
        run_id=run.pk,
        audience=approval_audience(approval),
    )
    if not settled:
        return stored  # "1 of 2": nothing to resume until the quorum is reached
    if run.is_external:
        # Its framework resumes it, told by the event above (webhook, stream): no task is sent.
        run_external_waiting_update(run)
        return stored
    if run.status == RunStatus.INPUT_REQUIRED:
        run_requeue(run)
    else:
        # A worker still holds the run: it sees this decision when it finishes
        # (runs.execution.run_finish) and requeues. The nudge is harmless: the task is idempotent.
        enqueue_on_commit(RESUME_TASK, run)
    return stored


def _device_decision_required(run: Run, approval: ApprovalRequest) -> bool:
    """Whether only the reviewer's device key may sign an approval of this call. An external
    run's agent is not one the desk loads (a desk agent of the same name says nothing of it):
    only the desk-wide DESK_REQUIRE_DEVICE_KEYS applies."""
    if run.is_external:
        return signing.device_decisions_required_everywhere()
    return signing.device_decision_required(agent=run.agent, tool=approval.tool)


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
    reviewer: User,
    verdict: str,
    checkpoint_id: str,
    reason: str = "",
    note: str = "",
    arguments: Any = None,
    external_ref: str = "",
    answer: Any = None,
    device: DeviceSignature | None = None,
    grant: Any = None,
    via: dict[str, Any] | None = None,
) -> Decision:
    """Decide, and with an approve optionally grant ahead of time (`grant`, grants.create): the
    grant is checked with the decision and stored in the same transaction, or neither is. The
    fields become one `DecisionInput`, which the check, the record and the payload read."""
    decision = DecisionInput(
        verdict=verdict,
        checkpoint_id=checkpoint_id,
        reason=reason,
        note=note,
        arguments=arguments,
        external_ref=external_ref,
        answer=answer,
        device=device,
        grant=grant,
    )
    with atomic_appends_last():
        approval, run = approval_check_decide(approval_id=approval_id, reviewer=reviewer, decision=decision)
        spec = None
        if decision.grant is not None:
            target = (
                grant_target_of_external(approval)
                if run.is_external
                else grant_target_of_tool(tool_still_deployed(run, approval))
            )
            spec = grant_check_input(
                grant=decision.grant,
                approval=approval,
                reviewer=reviewer,
                verdict=decision.verdict,
                tool=target,
            )
        stored = approval_do_decide(approval=approval, run=run, reviewer=reviewer, decision=decision, via=via)
        if spec is not None:
            grant_do_create(spec=spec, decision=stored, run=run, reviewer=reviewer)
        return stored


def decision_consume(*, decision_id: str) -> bool:
    """Mark the decision used, once: False when it already was (a replay). The gate calls
    this in the same transaction as the ledger row it authorises."""
    return decision_mark_consumed(decision_id)
