"""Fixtures for the desk's pages."""

from __future__ import annotations

import pytest

from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.approvals.models import ApprovalKind, ApprovalRequest, ApprovalStatus, Verdict
from reviewdesk.runs.execution import run_execute
from reviewdesk.runs.models import EffectStatus, SideEffect


@pytest.fixture
def pending(interrupted_run, personas):
    """pending(kind) → a pending request of that kind that bob may decide.

    A reconciliation is made as a crash makes one: alice approves send_email, its
    ledger row is left `pending`, and the next attempt finds it.
    """

    def make(kind: str) -> ApprovalRequest:
        run, approval = interrupted_run()
        if kind == ApprovalKind.TOOL_CALL:
            return approval
        decision = approval_decide(
            approval_id=approval.id,
            reviewer=personas.alice,
            verdict=Verdict.APPROVE,
            checkpoint_id=str(approval.checkpoint_id),
        )
        SideEffect.objects.create(
            run=run,
            idempotency_key=f"{run.id}:{approval.tool_call_id}",
            tool_call_id=approval.tool_call_id,
            tool="send_email",
            status=EffectStatus.PENDING,
            decision=decision,
        )
        run_execute(run_id=run.id)
        return ApprovalRequest.objects.get(
            run=run, kind=ApprovalKind.RECONCILE, status=ApprovalStatus.PENDING
        )

    return make
