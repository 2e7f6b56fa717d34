"""One-time links in notification emails: they open an approval's page, never decide.

The token is an `ApprovalLink` row's id signed with django.core.signing under its own salt
and a timestamp (so it expires after DESK_NOTIFY_LINK_MAX_AGE_SECONDS). Opening it needs the
reviewer it was sent to, logged in; its single use is a compare-and-set on `used_at`. The page
it opens checks again who may see and decide: the link grants nothing by itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.conf import settings
from django.core import signing
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from reviewdesk.approvals.models import ApprovalLink, ApprovalRequest
from reviewdesk.audit.services import audit_record

if TYPE_CHECKING:
    from django.contrib.auth.models import User

LINK_SALT = "reviewdesk.approvals.link"


class LinkRefused(Exception):
    """Why a link does not open: `code` is forged, expired, used or not_yours."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code, self.detail = code, detail


def link_create(*, approval: ApprovalRequest, user: User) -> str:
    """A new one-time link for `user` to `approval`'s page, as an absolute URL."""
    link = ApprovalLink.objects.create(request=approval, user=user)
    token = signing.dumps(str(link.id), salt=LINK_SALT)
    return settings.DESK_PUBLIC_URL + reverse("approval-link", args=[token])


def link_open(*, token: str, user: User) -> ApprovalRequest:
    """Spend the link for `user`; the approval it names. Raises LinkRefused."""
    try:
        link_id = signing.loads(token, salt=LINK_SALT, max_age=settings.DESK_NOTIFY_LINK_MAX_AGE_SECONDS)
    except signing.SignatureExpired:
        raise LinkRefused("expired", "This link has expired. Open the desk to find the approval.") from None
    except signing.BadSignature:
        raise LinkRefused("forged", "This link is not one the desk sent.") from None
    with transaction.atomic():
        link = ApprovalLink.objects.select_related("request").filter(pk=link_id).first()
        if link is None:
            raise LinkRefused("forged", "This link is not one the desk sent.")
        if link.user_id != user.pk:
            raise LinkRefused("not_yours", "This link was sent to another reviewer.")
        # Single use: only the first opening spends it.
        if ApprovalLink.objects.filter(pk=link.pk, used_at__isnull=True).update(used_at=timezone.now()) != 1:
            raise LinkRefused("used", "This link has been used already. Open the desk to find the approval.")
        audit_record(
            actor=user,
            action="approval.link_opened",
            subject_type="approval",
            subject_id=link.request_id,
            data={"link": str(link.pk)},
        )
    return link.request
