"""A submitted external call that a standing grant allows comes back approved at once, with a
decision signed as the grantor's (its reason names the grant), so its framework waits for
nobody. The decision is recorded as every decision is (`approval_do_decide`: signed, stored,
audited, pushed); the grant's use is counted with it (`grants.external`)."""

from __future__ import annotations

from reviewdesk.approvals.deciding.input import DecisionInput
from reviewdesk.approvals.deciding.record import approval_do_decide
from reviewdesk.approvals.grants.external import external_grant_use
from reviewdesk.approvals.models import ApprovalRequest, Decision, Verdict
from reviewdesk.runs.models import Run


def external_call_granted(*, approval: ApprovalRequest, run: Run) -> Decision | None:
    """Approve the just-raised `approval` under a live grant that covers it; None when none does.
    Lock precondition: the submit's transaction holds the run's row."""
    grant = external_grant_use(approval=approval, run=run)
    if grant is None:
        return None
    return approval_do_decide(
        approval=approval,
        run=run,
        reviewer=grant.granted_by,
        decision=DecisionInput(
            verdict=Verdict.APPROVE,
            checkpoint_id=str(approval.checkpoint_id),
            reason=f"allowed by the standing grant {grant.pk} of {grant.granted_by.get_username()}",
        ),
    )
