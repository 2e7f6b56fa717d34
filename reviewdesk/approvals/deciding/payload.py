"""The payload a decision's signature covers, built from the approval it decides and the
decision's input: the one function both the desk's own signature (`record.approval_do_decide`)
and a reviewer's device (`device.approval_device_payload`) sign over, so the two can never
drift apart."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings

from agents.decisions import decision_payload
from reviewdesk.approvals.models import ApprovalRequest
from reviewdesk.runs.models import Checkpoint, Run

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from reviewdesk.approvals.deciding.input import DecisionInput


def decision_payload_for(
    *,
    approval: ApprovalRequest,
    run: Run,
    reviewer: User,
    decision: DecisionInput,
    decision_id: uuid.UUID,
    issued_at: datetime,
    nonce: str | None,
    key_id: str,
    device: bool,
) -> dict[str, Any]:
    """The payload of this decision; the texts exactly as stored (the worker checks them).
    `device`: a reviewer's device key signs it (its payload has a form of its own)."""
    return decision_payload(
        decision_id=decision_id,
        request_id=approval.id,
        run_id=run.id,
        attempt=approval.attempt.number if approval.attempt else None,
        checkpoint_id=approval.checkpoint_id,
        tool_call_id=approval.tool_call_id,
        tool=approval.tool,
        arguments=decision.arguments_to_run(approval),
        verdict=decision.verdict,
        reviewer=reviewer.get_username(),
        issued_at=issued_at,
        not_after=decision_not_after(approval, issued_at),
        nonce=nonce,
        key_id=key_id,
        device=device,
        answer=decision.answer,
        external=external_binding(approval, run),
        **decision.texts(),
    )


def external_binding(approval: ApprovalRequest, run: Run) -> dict[str, str] | None:
    """What a decision on an external run's call binds besides (agents.decisions.EXTERNAL_BINDING):
    the account that submitted it, the framework's id for the run, and the framework's checkpoint
    the call was raised at (kept in the desk checkpoint's snapshot). None for an internal run."""
    if not run.is_external:
        return None
    snapshot = Checkpoint.objects.filter(pk=approval.checkpoint_id).values_list("snapshot", flat=True).first()
    return {
        "audience": run.submitted_by.get_username(),
        "external_id": run.external_id,
        "external_checkpoint": str((snapshot or {}).get("external_checkpoint", "")),
    }


def decision_not_after(approval: ApprovalRequest, issued_at: Any) -> Any:
    """Until when the worker may act on a decision issued at `issued_at`.

    A quorum vote waits for the others, as long as the request itself may wait: it stays valid
    until the request's expiry plus the validity, so a late last vote (still in date) never finds
    an earlier one expired and the run failing at the gate. It never outlives the request by more
    than one validity period, the bound every other decision has."""
    valid = timedelta(seconds=settings.DESK_DECISION_VALID_SECONDS)
    if approval.required_approvals > 1:
        return max(issued_at + valid, approval.expires_at + valid)
    return issued_at + valid
