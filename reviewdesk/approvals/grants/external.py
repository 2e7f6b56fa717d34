"""Standing grants for external runs' calls: the live grant that allows a call as it is
submitted, verified as the gate verifies one (its signature with the desk's keyring, its scope,
match and expiry, its grantor still one who could decide the call), and its use counted.
`runs/external/granted.py` then records the decision the grant stands in for.

Only grants made on external runs are asked (a desk agent's grant never allows a framework's
call), scoped to the run or to the framework's agent (`create.grant_agent_of`)."""

from __future__ import annotations

from django.db.models import Q
from django.utils import timezone

from agents.grants import GrantRefused, SignedGrant, verify_grant
from agents.ledger import CallBinding
from agents.tools import schema_errors
from reviewdesk.approvals.access import may_decide
from reviewdesk.approvals.grants.create import grant_agent_of, grant_target_of_external
from reviewdesk.approvals.grants.use import grant_use
from reviewdesk.approvals.models import ApprovalRequest, Grant, GrantScope
from reviewdesk.approvals.signing import FileKeyring, device_decisions_required_everywhere
from reviewdesk.runs.models import Run, RunKind


def external_grant_use(*, approval: ApprovalRequest, run: Run) -> Grant | None:
    """The grant that allows this external call, its use counted (in the caller's transaction,
    with the request it answers); None when none does. Narrowest first: the run's, then the
    agent's, soonest expiry first."""
    target = grant_target_of_external(approval)
    if not target.accepts_grants or device_decisions_required_everywhere():
        return None
    now = timezone.now()
    agent = grant_agent_of(run)
    candidates = (
        Grant.objects.filter(
            tool=approval.tool,
            revoked_at__isnull=True,
            expires_at__gt=now,
            approval__run__kind=RunKind.EXTERNAL,
            # An external agent's name is whatever its account sends: another account's agent
            # of the same name is another agent, and never inherits this one's grants.
            approval__run__submitted_by_id=run.submitted_by_id,
        )
        .filter(Q(scope=GrantScope.RUN, run=run) | Q(scope=GrantScope.AGENT, agent=agent))
        .select_related("granted_by", "approval")
    )
    order = {GrantScope.RUN: 0, GrantScope.AGENT: 1}
    binding = CallBinding(
        run_id=str(run.pk),
        checkpoint_id=str(approval.checkpoint_id),
        tool_call_id=approval.tool_call_id,
        tool=approval.tool,
    )
    for grant in sorted(candidates, key=lambda g: (order[GrantScope(g.scope)], g.expires_at)):
        if not _within_granted_schema(grant, approval):
            continue
        try:
            payload = verify_grant(
                SignedGrant(
                    grant_id=str(grant.pk),
                    payload=grant.payload,
                    signature=grant.signature,
                    key_id=grant.key_id,
                ),
                keyring=FileKeyring(),
                agent=agent,
                binding=binding,
                arguments=approval.arguments,
                now=now,
                grantor_allowed=_grantor_may_decide(grant, approval, run),
            )
        except GrantRefused:
            continue
        if grant_use(grant_id=str(grant.pk), binding=binding, max_uses=payload["max_uses"], attempt=None):
            return grant
    return None


def _within_granted_schema(grant: Grant, approval: ApprovalRequest) -> bool:
    """The call's arguments keep the schema the grantor saw: a constraint leaves the arguments
    it does not name free, and a later call sends whatever schema (or none) it likes."""
    schema = grant.approval.arguments_schema
    return schema is None or not schema_errors(schema, approval.arguments)


def _grantor_may_decide(grant: Grant, approval: ApprovalRequest, run: Run):
    """`verify_grant`'s grantor check: four eyes and the call's routing, as for a decision the
    grantor would make on it now."""
    grantor = grant.granted_by

    def allowed(username: str, run_id: str, tool: str, arguments: object) -> bool:
        return username == grantor.get_username() and may_decide(grantor, approval, run)

    return allowed
