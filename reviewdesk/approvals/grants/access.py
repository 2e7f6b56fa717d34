"""Who sees standing grants and who may end them: a grant is exactly as private as the run it
was made on; its status and uses (its use rows, counted) for the lists; revoking, by its
grantor or an admin, signed and pinned outside the database (`revocations`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.db.models import Count, F, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from reviewdesk.accounts.roles import is_admin, is_reviewer
from reviewdesk.approvals.grants.revocations import revocation_pin, revocation_sign
from reviewdesk.approvals.models import Grant, GrantUse
from reviewdesk.audit.services import audit_record
from reviewdesk.lib.db import ExistsPerRow
from reviewdesk.lib.errors import Conflict, Forbidden, NotFound
from reviewdesk.runs.access import runs_visible_to

if TYPE_CHECKING:
    from django.contrib.auth.models import User

GRANT_STATUSES = ("live", "revoked", "expired", "used_up")


def grant_status(grant: Grant) -> str:
    """live, revoked, expired or used_up (the first that applies, in that order of precedence
    after revoked)."""
    if grant.revoked_at is not None or grant.revocation is not None:
        return "revoked"
    if grant.expires_at <= timezone.now():
        return "expired"
    return "used_up" if grant.uses >= grant.max_uses else "live"


def grants_with_uses(grants: QuerySet[Grant]) -> QuerySet[Grant]:
    """The grants, each with its uses counted from its use rows (`Grant.uses` reads it)."""
    counted = (
        GrantUse.objects.filter(grant=OuterRef("pk"))
        .order_by()
        .values("grant")
        .annotate(n=Count("pk"))
        .values("n")
    )
    return grants.annotate(use_count=Coalesce(Subquery(counted), 0))


def grant_filter_status(grants: QuerySet[Grant], status: str) -> QuerySet[Grant]:
    """`grants` (from `grants_with_uses`) in that status."""
    now = timezone.now()
    if status == "revoked":
        return grants.filter(Q(revoked_at__isnull=False) | Q(revocation__isnull=False))
    unrevoked = grants.filter(revoked_at__isnull=True, revocation__isnull=True)
    if status == "expired":
        return unrevoked.filter(expires_at__lte=now)
    # use_count is grants_with_uses's annotation, which the stubs cannot see on QuerySet[Grant].
    if status == "used_up":
        return unrevoked.filter(expires_at__gt=now, use_count__gte=F("max_uses"))  # type: ignore[misc]
    return unrevoked.filter(expires_at__gt=now, use_count__lt=F("max_uses"))  # type: ignore[misc]


def grants_visible_to(user: User) -> QuerySet[Grant]:
    """Admins see every grant; a reviewer the grants they made and those made on an approval of
    a run they may see. A grant carries its source call's arguments (an exact grant) and names
    its run, whatever its scope, so it is exactly as private as that run. Each grant's run is
    checked on its own (a few grants, many runs): an IN over every run the reviewer may see
    read all of them for each page (113 ms at 100,000 runs and 300 grants on PostgreSQL; now 3)."""
    grants = grants_with_uses(Grant.objects.select_related("granted_by", "revoked_by", "run"))
    if is_admin(user):
        return grants
    if not is_reviewer(user):
        return grants.none()
    its_run = runs_visible_to(user).filter(approvals=OuterRef("approval"))
    return grants.filter(Q(granted_by=user) | Q(ExistsPerRow(its_run)))


def grant_get_visible(*, grant_id: Any, user: User) -> Grant:
    try:
        grant = grants_visible_to(user).filter(pk=grant_id).first()
    except (ValueError, TypeError):
        grant = None
    if grant is None:
        raise NotFound("no such grant")
    return grant


def grant_may_revoke(user: User, grant: Grant) -> bool:
    return is_admin(user) or (is_reviewer(user) and grant.granted_by_id == user.pk)


def grant_revoke(*, grant_id: Any, user: User) -> Grant:
    """Revoke the grant at once: the desk's key signs the revocation (the grant, who, when), the
    row keeps it and the pinned file gets it before the transaction commits, and every later
    use re-reads all three and is refused. Only its grantor or an admin may; revoking twice is 409.

    The file is written last in the transaction: a revocation that could not be pinned raises
    and rolls the row back, so the grant is never shown revoked while the pin is missing."""
    with transaction.atomic():
        grant = grant_get_visible(grant_id=grant_id, user=user)
        if not grant_may_revoke(user, grant):
            raise Forbidden("only the grant's owner or an admin may revoke it")
        now = timezone.now()
        revocation = revocation_sign(grant=grant, user=user, at=now)
        revoked = Grant.objects.filter(pk=grant.pk, revoked_at__isnull=True).update(
            revoked_at=now,
            revoked_by=user,
            revocation=revocation.payload,
            revocation_signature=revocation.signature,
        )
        if revoked != 1:
            raise Conflict("this grant was already revoked", code="revoked")
        grant.refresh_from_db()
        audit_record(
            actor=user,
            action="grant.revoked",
            subject_type="grant",
            subject_id=grant.pk,
            data={"uses": grant.uses, "max_uses": grant.max_uses, "tool": grant.tool},
        )
        revocation_pin(revocation)
    return grant
