"""Consuming an external call's decision: `POST /api/v1/approvals/{id}/consume`.

The framework's guard calls it after verifying the signed decision in its own process and right
before the tool runs. A decision authorises one execution: the compare-and-set on
`Decision.consumed_at` lets exactly one consume through, and an approve or an edit opens the
call's ledger row (`pending`) in the same transaction, which the framework's report confirms
(`report`). A rejection is consumed too (the framework has answered the model), with no row.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.utils import timezone

from agents.decisions import APPROVING_VERDICTS
from reviewdesk.approvals.models import ApprovalRequest, Decision
from reviewdesk.approvals.rows import decision_mark_consumed
from reviewdesk.audit.services import audit_record
from reviewdesk.lib.db import atomic_appends_last
from reviewdesk.lib.errors import Conflict, Gone, Invalid, NotFound
from reviewdesk.runs.models import ENDED, EffectStatus, Run, SideEffect
from reviewdesk.runs.rows import run_locked, side_effect_insert

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def ledger_key(run: Run, tool_call_id: str) -> str:
    """The ledger row's idempotency key for a call: the run and the call, as for a desk run's."""
    return f"{run.pk}:{tool_call_id}"


def external_consume(*, approval_id: Any, user: User, decision_id: Any, nonce: str) -> datetime:
    """Consume the decision that settled the approval, once; return when it was consumed.

    404 for anyone but the run's submitter (as a missing approval), 409 `not_external` for a desk
    run's approval (its gate consumes), 422 when the ids are not the approval's settling decision,
    409 `ended` once the run has ended, 410 `expired` past the decision's not_after, 409
    `consumed` when it was consumed already.
    """
    with atomic_appends_last():
        run, approval = _locked_for_submitter(approval_id, user)
        decision = approval.decision
        if decision is None or str(decision.pk) != str(decision_id) or decision.nonce != nonce:
            raise Invalid(
                "decision_id and nonce are not those of the decision that settled this approval",
                code="invalid",
            )
        if run.status in ENDED:
            raise Conflict(f"the run has already ended ({run.status})", code="ended")
        now = timezone.now()
        if decision.not_after <= now:
            raise Gone("the decision is past its not_after: ask for a new one", code="expired")
        if not decision_mark_consumed(str(decision.pk)):
            raise Conflict("the decision was already consumed: it authorises one execution", code="consumed")
        if decision.verdict in APPROVING_VERDICTS:
            _open_ledger_row(run, approval, decision)
        audit_record(
            actor=user,
            action="decision.consumed",
            subject_type="approval",
            subject_id=approval.pk,
            data={"decision": str(decision.pk), "run": str(run.pk), "verdict": decision.verdict},
        )
    return now


def _locked_for_submitter(approval_id: Any, user: User) -> tuple[Run, ApprovalRequest]:
    """The approval's run and the approval, locked in the decision's order (run, then request),
    or 404 unless `user` submitted the run; 409 for a desk run's."""
    try:
        run = run_locked(approval_id, of_approval=True)
        approval = (
            ApprovalRequest.objects.select_for_update()
            .prefetch_related("decisions")
            .get(pk=approval_id, run=run)
        )
    except (ValidationError, Run.DoesNotExist, ApprovalRequest.DoesNotExist):
        raise NotFound("no such approval") from None
    if run.submitted_by_id != user.pk:
        raise NotFound("no such approval")
    if not run.is_external:
        raise Conflict("this approval is of a desk run: its gate consumes the decision", code="not_external")
    return run, approval


def _open_ledger_row(run: Run, approval: ApprovalRequest, decision: Decision) -> None:
    side_effect_insert(
        SideEffect(
            run=run,
            idempotency_key=ledger_key(run, approval.tool_call_id),
            tool_call_id=approval.tool_call_id,
            tool=approval.tool,
            status=EffectStatus.PENDING,
            decision=decision,
        )
    )
