"""Linking a Slack user to a desk account: the desk shows its signed-in owner a one-time code
(`link_code_create`), and the Slack user sends it to the app (`/desk link CODE`, a request
Slack signs): `link_complete` then binds that Slack user to that account. Each side is proven
by what only it holds; nobody is matched by display name or email. The owner (`/settings/`)
or an admin (the admin site) removes a link; every change is audited."""

from __future__ import annotations

import hashlib
import logging
import secrets
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone

from reviewdesk.audit.services import audit_record
from reviewdesk.lib.errors import Conflict, Invalid
from reviewdesk.slack.models import SlackLink, SlackLinkCode

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from django.contrib.auth.models import User

# No 0/O, 1/I/L: read off one screen and typed into another. 12 of 31: some 59 bits.
CODE_ALPHABET = "23456789ABCDEFGHJKMNPQRSTUVWXYZ"
CODE_LENGTH = 12


def _digest(code: str) -> str:
    normal = "".join(code.split()).replace("-", "").upper()
    return hashlib.sha256(normal.encode()).hexdigest()


def link_code_create(*, user: User) -> str:
    """A new code for `user` (shown once, as XXXX-XXXX-XXXX); any earlier unused one of theirs
    stops working."""
    raw = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))
    now = timezone.now()
    with transaction.atomic():
        SlackLinkCode.objects.filter(user=user, used_at__isnull=True).update(used_at=now)
        SlackLinkCode.objects.create(
            user=user,
            code_sha256=_digest(raw),
            expires_at=now + timedelta(seconds=settings.DESK_SLACK_LINK_CODE_SECONDS),
        )
        audit_record(
            actor=user,
            action="slack.link_code_created",
            subject_type="user",
            subject_id=user.pk,
            data={"user": user.get_username()},
        )
    return "-".join(raw[i : i + 4] for i in range(0, CODE_LENGTH, 4))


def link_complete(*, code: str, team_id: str, slack_user_id: str) -> SlackLink:
    """Bind the Slack user who sent `code` to the account it was shown to. Raises Invalid for a
    code that is unknown, expired or used, Conflict when either side is linked already."""
    now = timezone.now()
    with transaction.atomic():
        found = SlackLinkCode.objects.select_related("user").filter(code_sha256=_digest(code)).first()
        if found is None or found.expires_at <= now:
            raise Invalid("that code is not one the desk showed, or it has expired")
        # Single use: only the first request that sends it spends it.
        if SlackLinkCode.objects.filter(pk=found.pk, used_at__isnull=True).update(used_at=now) != 1:
            raise Invalid("that code has been used already")
        user = found.user
        if SlackLink.objects.filter(user=user).exists():
            raise Conflict("your desk account is linked already: unlink it on the desk first")
        try:
            with transaction.atomic():
                link = SlackLink.objects.create(user=user, team_id=team_id, slack_user_id=slack_user_id)
        except IntegrityError:
            raise Conflict("this Slack user is linked to another desk account") from None
        audit_record(
            actor=user,
            action="slack.linked",
            subject_type="user",
            subject_id=user.pk,
            data={"user": user.get_username(), "slack_team": team_id, "slack_user": slack_user_id},
        )
    _tell_owner(link)
    return link


def _tell_owner(link: SlackLink) -> None:
    """Mail the account's owner that a Slack user was linked: a code seen over a shoulder and
    sent first links the wrong person, and the owner is the one who can tell."""
    user = link.user
    if not user.email or not settings.DESK_NOTIFY_EMAIL:
        return
    try:
        send_mail(
            subject="[Review Desk] A Slack user was linked to your account",
            message=(
                f"Hello {user.get_username()},\n\nSlack user {link.slack_user_id} (workspace {link.team_id}) "
                "was linked to your desk account: its clicks on Approve and Reject now decide as you.\n\n"
                f"If that was not you, unlink it now and tell an admin: {settings.DESK_PUBLIC_URL}{reverse('settings')}\n"
            ),
            from_email=None,
            recipient_list=[user.email],
        )
    except Exception as exc:
        logger.warning(
            "slack: could not mail %s of their new link: %s", user.get_username(), type(exc).__name__
        )


def link_of(*, team_id: str, slack_user_id: str) -> SlackLink | None:
    """The link a click from this Slack user goes through, or None: unlinked (or inactive)."""
    return (
        SlackLink.objects.select_related("user")
        .filter(team_id=team_id, slack_user_id=slack_user_id, user__is_active=True)
        .first()
    )


def link_remove(*, link: SlackLink, by: User, via: str) -> None:
    """Remove `link` (its owner on /settings/, or an admin), audited with who did it."""
    with transaction.atomic():
        data: dict[str, Any] = {
            "user": link.user.get_username(),
            "slack_team": link.team_id,
            "slack_user": link.slack_user_id,
            "via": via,
        }
        SlackLink.objects.filter(pk=link.pk).delete()
        audit_record(
            actor=by, action="slack.unlinked", subject_type="user", subject_id=link.user_id, data=data
        )


def link_notify_set(*, link: SlackLink, notify: bool, by: User) -> None:
    """Whether what the desk would mail `link`'s owner goes to Slack instead; audited."""
    with transaction.atomic():
        if SlackLink.objects.filter(pk=link.pk).exclude(notify=notify).update(notify=notify):
            audit_record(
                actor=by,
                action="notification_settings.changed",
                subject_type="user",
                subject_id=link.user_id,
                data={"user": link.user.get_username(), "changed": {"slack": notify}, "via": "settings page"},
            )
