"""Standing grants for external runs' calls: a call a live grant covers comes back from its
submit already approved, with a decision signed in the grant's name."""

from __future__ import annotations

from reviewdesk.approvals.models import ApprovalRequest, Decision
from reviewdesk.runs.models import Run


def external_call_granted(*, approval: ApprovalRequest, run: Run) -> Decision | None:
    """Not yet: every external call waits for a reviewer (issue 37, step 3)."""
    return None
