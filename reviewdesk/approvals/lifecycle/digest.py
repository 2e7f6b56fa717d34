"""The digest: one mail per reviewer at most every few minutes (`digests_send`, beat's
`approvals.digest`) listing what newly waits for them, grouped by agent and tool, each item with
its key fact and a one-time link. Who hears and what a mail says are notify.py's; what makes a
digest at most once (the claim on `digest_sent_at`, a row per listed item) is here, as the
module docstring of notify.py describes it."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import EmailMessage
from django.db import transaction
from django.db.models import Exists, OuterRef
from django.urls import reverse

from reviewdesk.accounts.models import NotificationPreference, NotifyMode
from reviewdesk.accounts.preferences import digest_minutes_of, preference_of, preferences_of
from reviewdesk.accounts.roles import group_names_of, is_reviewer
from reviewdesk.approvals.access import may_decide
from reviewdesk.approvals.lifecycle.links import link_create
from reviewdesk.approvals.lifecycle.notify import (
    DIGEST,
    SUBJECT_MAX,
    NotifyChannel,
    channel_for,
    expiry_line,
    key_fact,
    mail_failed,
    message_id_header,
    notifying,
    shown,
)
from reviewdesk.approvals.models import ApprovalKind, ApprovalRequest, ApprovalStatus, NotificationSent
from reviewdesk.approvals.reads.queue import approvals_pending_for
from reviewdesk.audit.services import audit_record

if TYPE_CHECKING:
    from django.contrib.auth.models import User

DIGEST_ITEMS_MAX = 50  # listed in one digest; the rest wait for the next


def digests_send(*, now: datetime) -> int:
    """Send each reviewer in digest mode whose interval has passed what newly waits for them,
    in one mail (or one message where they hear instead); how many digests went out."""
    if not notifying():
        return 0
    users = list(get_user_model().objects.filter(is_active=True).exclude(email="").order_by("username"))
    preferences = preferences_of(users)
    sent = 0
    for user in users:
        preference = preferences[user.pk]
        if preference.mode != NotifyMode.DIGEST or not is_reviewer(user):
            continue
        seen = preference.digest_sent_at
        if seen is not None and now < seen + timedelta(minutes=digest_minutes_of(preference)):
            continue
        sent += digest_send(
            user=user, seen=seen, items=digest_items(user), now=now, channel=channel_for(user)
        )
    return sent


def digest_items(user: User, *, limit: int | None = None) -> list[ApprovalRequest]:
    """What newly waits for `user`: the desk's pending items for them (`approvals_pending_for`)
    that they may decide (`may_decide`), announced already (the mails at once had their say)
    and of which no mail has told them yet; the oldest `limit` (one more than a digest lists,
    to know that more wait, without reading every pending row)."""
    told = NotificationSent.objects.filter(user=user, request=OuterRef("pk"))
    rows = (
        approvals_pending_for(user)
        .filter(notified_at__isnull=False)
        .exclude(Exists(told))
        .select_related("run")
        .order_by("created_at", "id")
    )
    group_names = group_names_of(user)
    limit = DIGEST_ITEMS_MAX + 1 if limit is None else limit
    found: list[ApprovalRequest] = []
    for approval in rows.iterator(chunk_size=200):
        if may_decide(user, approval, group_names=group_names):
            found.append(approval)
            if len(found) == limit:
                break
    return found


def digest_send(
    *,
    user: User,
    seen: datetime | None,
    items: list[ApprovalRequest],
    now: datetime,
    channel: NotifyChannel | None = None,
) -> int:
    """Send `user` one digest of `items` (read by `digest_items`) if their `digest_sent_at` is
    still `seen`, what this tick read before it: 1 if this tick sent it, 0 if there was nothing
    new or another tick, which read the same, got there first. Through `channel` (where they
    hear instead of by mail) when given: it lists at most its `digest_max`, the rest wait."""
    listed_max = min(DIGEST_ITEMS_MAX, channel.digest_max) if channel is not None else DIGEST_ITEMS_MAX
    more = len(items) > listed_max
    with transaction.atomic():
        # Decided, expired or cancelled since they were read: not in it.
        pending = set(
            ApprovalRequest.objects.filter(
                pk__in=[a.pk for a in items[:listed_max]], status=ApprovalStatus.PENDING
            ).values_list("pk", flat=True)
        )
        items = [a for a in items[:listed_max] if a.pk in pending]
        if not items:
            return 0
        NotificationPreference.objects.get_or_create(user=user)  # the row the claim moves
        # The claim: of two ticks that read the same `seen`, one moves it and sends.
        claimed = NotificationPreference.objects.filter(user=user, digest_sent_at=seen).update(
            digest_sent_at=now
        )
        if claimed != 1:
            return 0
        _record_each(items, user, now)
        if channel is not None:
            channel.send_digest(user, items, more=more, now=now)
            return 1
    return 1 if digest_mail(user=user, items=items, more=more, now=now) else 0


def digest_mail(*, user: User, items: list[ApprovalRequest], more: bool, now: datetime) -> bool:
    """Mail `user` the digest of `items`, each with a link of their own; whether it went (a
    failure is logged and audited). Nothing with mail off (DESK_NOTIFY_EMAIL)."""
    if not settings.DESK_NOTIFY_EMAIL:
        return False
    with transaction.atomic():
        links = {a.pk: link_create(approval=a, user=user) for a in items}
    facts = {a.pk: key_fact(a) for a in items}
    try:
        _digest_message(user, items, links, facts, preference_of(user), more=more, now=now).send()
    except Exception as exc:
        mail_failed(user.pk, user, DIGEST, exc, subject_type="user")
        return False
    audit_record(
        actor=None,
        action="notification.digest_sent",
        subject_type="user",
        subject_id=user.pk,
        data={"to": user.get_username(), "approvals": [str(a.pk) for a in items]},
    )
    return True


def _record_each(items: list[ApprovalRequest], user: User, now: datetime) -> None:
    NotificationSent.objects.bulk_create(
        [NotificationSent(request=a, user=user, occasion=DIGEST, sent_at=now) for a in items],
        ignore_conflicts=True,
    )


def _label(approval: ApprovalRequest) -> str:
    if approval.kind == ApprovalKind.QUESTION:
        return "question"
    if approval.kind == ApprovalKind.RECONCILE:
        return f"{approval.tool} check"
    return approval.tool


def digest_subject(items: list[ApprovalRequest]) -> str:
    """ "3 calls wait for your review: 2 send_email, 1 refund_payment" """
    counts = Counter(_label(a) for a in items)
    noun = "call" if all(a.kind == ApprovalKind.TOOL_CALL for a in items) else "item"
    noun += "" if len(items) == 1 else "s"
    verb = "waits" if len(items) == 1 else "wait"
    kinds = ", ".join(f"{n} {label}" for label, n in counts.most_common())
    return f"{len(items)} {noun} {verb} for your review: {kinds}"


def _digest_message(
    user: User,
    items: list[ApprovalRequest],
    links: dict[Any, str],
    facts: dict[Any, dict[str, Any]],
    preference: NotificationPreference,
    *,
    more: bool,
    now: datetime,
) -> EmailMessage:
    groups: dict[tuple[str, str], list[ApprovalRequest]] = {}
    for approval in items:
        groups.setdefault((approval.run.agent, _label(approval)), []).append(approval)
    lines = [
        f"Hello {user.get_username()},",
        "",
        f"{digest_subject(items)}. Each link opens its item's page, for you only and once;",
        "deciding still takes your click there.",
    ]
    for (agent, label), approvals in sorted(groups.items()):
        lines += ["", f"{agent} · {label} ({len(approvals)})"]
        for approval in approvals:
            fact = facts[approval.pk]
            lines.append(f"  - {fact['fact']}")
            lines += [f"    ⚠ {w}" for w in fact["warnings"]]
            lines += [f"    {expiry_line(approval, now)}", f"    {links[approval.pk]}"]
    if more:
        lines += ["", f"More wait on the desk; the next digest lists the next {DIGEST_ITEMS_MAX}."]
    lines += [
        "",
        f"The desk: {settings.DESK_PUBLIC_URL}{reverse('desk')}",
        f"A digest at most every {digest_minutes_of(preference)} min; change how and when the desk "
        f"mails you: {settings.DESK_PUBLIC_URL}{reverse('settings')}",
    ]
    return EmailMessage(
        subject=shown(f"[Review Desk] {digest_subject(items)}", SUBJECT_MAX),
        body="\n".join(lines) + "\n",
        to=[user.email],
        headers=message_id_header(),
    )
