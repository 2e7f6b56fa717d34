"""The gate's half of standing grants: the live grants for a call, the one whose signed match
and grantor fit it, and its use. A use locks the grant's row, re-reads it (unrevoked, unexpired,
and no signed revocation stored or pinned: `revocations.grant_signed_revoked`), counts its use
rows against the signed limit and writes the next one: two workers racing for the last use
cannot both win (the lock, and the unique use number behind it), and a revocation stops the
very next call. Any refusal, a use row the database refuses included, is a `False` the gate
turns into GrantRefused, so the call asks a human. Whatever the scope, a grant is used only on
runs its grantor could decide (four eyes, assignment)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.utils import timezone

from agents.grants import SignedGrant, grant_mismatch
from agents.ledger import CallBinding
from agents.state import CallState
from reviewdesk.approvals.access import may_review_run
from reviewdesk.approvals.grants.revocations import grant_signed_revoked
from reviewdesk.approvals.lifecycle.routing import named_for_call
from reviewdesk.approvals.models import (
    Grant,
    GrantScope,
    GrantUse,
)
from reviewdesk.approvals.rows import grants_live_for
from reviewdesk.audit.services import audit_record
from reviewdesk.runs.models import Attempt, Run

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def grant_matching_call(*, run: Run, call: CallState) -> str | None:
    """The id of the narrowest live grant covering this call of `run` (run, then agent, then
    global; soonest expiry first), or None. The gate verifies the signed payload later."""
    candidates = grants_live_for(run=run, tool=call.name)
    order = {GrantScope.RUN: 0, GrantScope.AGENT: 1, GrantScope.GLOBAL: 2}
    for grant in sorted(candidates, key=lambda g: (order[GrantScope(g.scope)], g.expires_at)):
        covers = grant_mismatch(
            grant.payload, agent=run.agent, run_id=str(run.pk), tool=call.name, arguments=call.arguments
        )
        # as the gate will check: its maker could decide this very call
        if covers is None and grantor_may_decide(grant.granted_by, run, call.name, call.arguments):
            return str(grant.pk)
    return None


def grantor_may_decide(user: User, run: Run, tool: str, arguments: Any) -> bool:
    """Whether a grant's maker could decide this very call (its routing, not only the run)."""
    return may_review_run(user, run) and named_for_call(user, run, tool, arguments)


def grantor_may_decide_by_name(username: str, run_id: str, tool: str, arguments: Any) -> bool:
    """The gate's check, at execution time, that a grant's maker could decide this call of the
    run: a reviewer, not the run's submitter, the run not assigned to others, and named by the
    targets the call would be routed to (a grant never decides what its maker could not)."""
    user = get_user_model().objects.filter(username=username).first()
    run = Run.objects.filter(pk=run_id).first()
    if user is None or run is None:
        return False
    return grantor_may_decide(user, run, tool, arguments)


def signed_grant(grant_id: str) -> SignedGrant | None:
    grant = Grant.objects.filter(pk=grant_id).first()
    if grant is None:
        return None
    return SignedGrant(
        grant_id=str(grant.pk), payload=grant.payload, signature=grant.signature, key_id=grant.key_id
    )


def grant_is_live(grant_id: str) -> bool:
    """Neither revoked (by its row or a signed revocation) nor expired now, its uses aside
    (see `Ledger.grant_live`)."""
    grant = Grant.objects.filter(pk=grant_id, revoked_at__isnull=True, expires_at__gt=timezone.now()).first()
    return grant is not None and not grant_signed_revoked(grant)


def grant_use(*, grant_id: str, binding: CallBinding, max_uses: int, attempt: Attempt | None) -> bool:
    """Count one use of the grant for this call; False when it is revoked, expired or has
    `max_uses` (the signed limit) uses already, or when the database refuses the use row.
    Audited with the grant that allowed the call.

    Lock precondition: the caller's transaction also writes the call's ledger row, so the use
    and the row commit together. The grant row's lock (FOR UPDATE on PostgreSQL; SQLite's
    IMMEDIATE transactions serialise writers) holds a concurrent use until this one commits,
    and it then counts this one's row.
    """
    now = timezone.now()
    grant = (
        Grant.objects.select_for_update(of=("self",))
        .select_related("granted_by")
        .filter(pk=grant_id, revoked_at__isnull=True, expires_at__gt=now)
        .first()
    )
    if grant is None or grant_signed_revoked(grant):
        return False
    used = GrantUse.objects.filter(grant=grant).count()
    if used >= max_uses:
        return False
    try:
        with transaction.atomic():  # a savepoint: a refused row leaves the caller's transaction usable
            GrantUse.objects.create(
                grant=grant,
                run_id=binding.run_id,
                tool_call_id=binding.tool_call_id,
                idempotency_key=binding.idempotency_key,
                number=used + 1,
                used_at=now,
            )
    except IntegrityError:
        # The number is taken (use rows renumbered or deleted by hand) or this call was counted
        # already: refused like any grant the ledger will not count, so a human is asked.
        return False
    audit_record(
        actor=None,
        action="grant.used",
        subject_type="grant",
        subject_id=grant.pk,
        data={
            "run": binding.run_id,
            "tool_call_id": binding.tool_call_id,
            "tool": binding.tool,
            "attempt": attempt.number if attempt else None,
            "use": used + 1,
            "max_uses": grant.max_uses,
            "granted_by": grant.granted_by.get_username(),
        },
    )
    return True
