"""Users, groups and tokens: every change here is audited, whoever makes it.

The admin, the commands and seed_demo call these services rather than saving
rows themselves (STYLE: no business logic in signals or save()); an m2m_changed
signal would have audited too, but could not say who made the change.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.contrib.auth.models import Group, Permission, User
from django.db import transaction
from django.utils import timezone

from reviewdesk.accounts.models import ApiToken, Scope
from reviewdesk.audit.services import audit_record

TOKEN_PREFIX = "rd_"


def token_digest(raw: str) -> str:
    # Tokens carry 256 bits of entropy, so a fast hash is enough (no stretching needed).
    return hashlib.sha256(raw.encode()).hexdigest()


def token_create(
    *,
    user: User,
    scopes: Iterable[str],
    name: str = "",
    by: User | None = None,
    via: str = "",
    expires_at: datetime | None = None,
) -> tuple[ApiToken, str]:
    """Create a token; return the row and the raw token, which is never stored nor audited.

    `by` is who created it (None for a command run on the server, named in `via`);
    `expires_at`, when given, must be in the future: from then on the API refuses the token.
    """
    scopes = sorted(set(scopes))
    unknown = set(scopes) - set(Scope.values)
    if unknown or not scopes:
        raise ValueError(f"scopes must be among {', '.join(Scope.values)}; got {scopes}")
    if expires_at is not None and expires_at <= timezone.now():
        raise ValueError("the expiry must be in the future")
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        token = ApiToken.objects.create(
            user=user,
            name=name,
            prefix=raw[:10],
            token_sha256=token_digest(raw),
            scopes=scopes,
            expires_at=expires_at,
        )
        audit_record(
            actor=by,
            action="token.created",
            subject_type="token",
            subject_id=token.pk,
            data={
                "user": user.get_username(),
                "prefix": token.prefix,
                "scopes": scopes,
                "name": name,
                "via": via,
                **({"expires_at": expires_at.isoformat()} if expires_at else {}),
            },
        )
    return token, raw


def token_revoke(*, token: ApiToken, by: User | None, via: str = "") -> bool:
    """Revoke `token` for good; False when it already was (nothing changes, nothing is audited).

    Compare-and-set on `revoked_at IS NULL`: no code path clears `revoked_at`, so a
    revoked token stays revoked, and the authentication refuses any token that has one.
    """
    with transaction.atomic():
        now = timezone.now()
        if ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=now) != 1:
            return False
        token.revoked_at = now
        audit_record(
            actor=by,
            action="token.revoked",
            subject_type="token",
            subject_id=token.pk,
            data={"user": token.user.get_username(), "prefix": token.prefix, "via": via},
        )
    return True


def user_save(
    *, user: User, by: User | None, created: bool, changed: Iterable[str] = (), via: str = ""
) -> None:
    """Save `user` as edited by `by` and audit it: created, (de)activated or changed (field names only)."""
    changed = sorted(changed)
    with transaction.atomic():
        user.save()
        if created:
            action = "user.created"
        elif not changed:
            return
        elif "is_active" in changed:
            action = "user.activated" if user.is_active else "user.deactivated"
        else:
            action = "user.changed"
        audit_record(
            actor=by,
            action=action,
            subject_type="user",
            subject_id=user.pk,
            data={
                "username": user.get_username(),
                "fields": changed,
                "is_active": user.is_active,
                "is_staff": user.is_staff,
                "is_superuser": user.is_superuser,
                "via": via,
            },
        )


def _m2m_set(*, owner: Any, field: str, items: Iterable[Any], by: User | None, via: str, label: Any) -> None:
    manager = getattr(owner, field)
    before, after = set(manager.all()), set(items)
    if before == after:
        return
    with transaction.atomic():
        manager.set(after)
        audit_record(
            actor=by,
            action=f"{owner._meta.model_name}.{field}_changed",
            subject_type=owner._meta.model_name,
            subject_id=owner.pk,
            data={
                "name": str(owner),
                "added": sorted(label(item) for item in after - before),
                "removed": sorted(label(item) for item in before - after),
                "via": via,
            },
        )


def _permission_label(permission: Permission) -> str:
    return f"{permission.content_type.app_label}.{permission.codename}"


def user_groups_set(*, user: User, groups: Iterable[Group], by: User | None, via: str = "") -> None:
    """Make `groups` the user's groups; audit who was added to or removed from which."""
    _m2m_set(owner=user, field="groups", items=groups, by=by, via=via, label=lambda group: group.name)


def user_permissions_set(
    *, user: User, permissions: Iterable[Permission], by: User | None, via: str = ""
) -> None:
    _m2m_set(owner=user, field="user_permissions", items=permissions, by=by, via=via, label=_permission_label)


def user_password_changed(*, user: User, by: User | None, via: str = "") -> None:
    """Audit that `user`'s password was set by `by` (the password itself never reaches the trail)."""
    audit_record(
        actor=by,
        action="user.password_changed",
        subject_type="user",
        subject_id=user.pk,
        data={"username": user.get_username(), "via": via},
    )


def user_delete(*, user: User, by: User | None, via: str = "") -> None:
    with transaction.atomic():
        audit_record(
            actor=by,
            action="user.deleted",
            subject_type="user",
            subject_id=user.pk,
            data={"username": user.get_username(), "via": via},
        )
        user.delete()


def group_save(
    *, group: Group, by: User | None, created: bool, changed: Iterable[str] = (), via: str = ""
) -> None:
    changed = sorted(changed)
    with transaction.atomic():
        group.save()
        if created or changed:
            audit_record(
                actor=by,
                action="group.created" if created else "group.changed",
                subject_type="group",
                subject_id=group.pk,
                data={"name": group.name, "fields": changed, "via": via},
            )


def group_permissions_set(
    *, group: Group, permissions: Iterable[Permission], by: User | None, via: str = ""
) -> None:
    _m2m_set(owner=group, field="permissions", items=permissions, by=by, via=via, label=_permission_label)


def group_delete(*, group: Group, by: User | None, via: str = "") -> None:
    """Delete `group`, auditing the members it took with it (deleting `reviewers` demotes them all)."""
    with transaction.atomic():
        audit_record(
            actor=by,
            action="group.deleted",
            subject_type="group",
            subject_id=group.pk,
            data={
                "name": group.name,
                "members": sorted(group.user_set.values_list("username", flat=True)),
                "via": via,
            },
        )
        group.delete()
