"""Email notifications: what waits for a reviewer, each item with its key fact and a one-time
link to its page (lifecycle/links.py), as each reviewer chose on `/settings/`
(accounts/preferences.py):

- **digest** (the default): one mail at most every few minutes (digest.py `digests_send`, beat's
  `approvals.digest`) listing what newly waits for them, grouped by agent and tool; a mail at
  once only for an item assigned to them by name (`assigned_by_name`), or one about to expire
  or past half its response target (`EXPIRING`, `REMINDER`), each as they chose;
- **every**: a mail at once for every item and occasion;
- **off**: no mail.

A reviewer may hear somewhere else instead of by mail: a channel registered with
`register_channel` (the Slack app's, reviewdesk/slack/) takes the mails at once and digests of
those it `takes`, and posts what `announced` items to where admins asked. It mails them itself
(`mail_item`, digest.py `digest_mail`) when it cannot deliver.

Beat sends them, never a run's worker: a slow or failing mail server delays a notification,
never a run. A failure is logged and audited (`notification.failed`); the item stays on the
desk. Every mail is at most once (a crash mid-send loses it):

- `approvals.tick` claims an item's `notified_at` by compare-and-set and, in the same
  transaction, writes a `NotificationSent` row for each reviewer it mails at once;
- a digest lists only items announced (`notified_at` set) and with no row for its reader, and
  is sent only by the tick that moves the reader's `digest_sent_at` from the value it read,
  writing the listed items' rows in that transaction: two ticks send one digest, and an item
  goes in one digest once;
- an expiry warning is claimed by inserting its row (unique per reviewer, item and occasion).
"""

from __future__ import annotations

import logging
import unicodedata
import uuid
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from django.conf import settings
from django.core.mail import EmailMessage
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from reviewdesk.accounts.models import NotificationPreference, NotifyMode
from reviewdesk.accounts.preferences import preferences_of
from reviewdesk.accounts.roles import is_reviewer
from reviewdesk.approvals.access import deciders_of
from reviewdesk.approvals.lifecycle.clock import chain_entry_users, escalation_chain
from reviewdesk.approvals.lifecycle.links import link_create
from reviewdesk.approvals.models import ApprovalKind, ApprovalRequest, ApprovalStatus, NotificationSent
from reviewdesk.approvals.reads.context import approval_preview
from reviewdesk.audit.services import audit_record

if TYPE_CHECKING:
    from django.contrib.auth.models import User

logger = logging.getLogger(__name__)

CREATED, REMINDER, ESCALATED, EXPIRING, DIGEST = "created", "reminder", "escalated", "expiring", "digest"
# Each names the tool and its key fact: 36 mails with one subject could not be told apart.
SUBJECTS = {
    CREATED: "{what} waits for you: {fact}",
    REMINDER: "Reminder: {what} still waits for you: {fact}",
    ESCALATED: "Escalated to you: {what}: {fact}",
    EXPIRING: "Expires in {minutes} min: {what}: {fact}",
}
# The preview rows that say what a call does at a glance (an email's recipient and subject, a
# refund's amount and what is left, a command's directory), in the preview's own order.
KEY_ROWS = ("To", "Subject", "This refund", "Left after it", "Working directory")
FACT_VALUE_MAX = 80  # characters of one value in a key fact
SUBJECT_MAX = 160


# --- who hears, and how -------------------------------------------------------------------


class NotifyChannel(Protocol):
    """Somewhere besides mail where reviewers hear of items (reviewdesk/slack/outbox.py).
    Each method is called in the transaction that claims the notification, and only queues."""

    digest_max: int  # items one digest there can list

    def active(self) -> bool:
        """Whether it is configured at all (the notifications run for it with mail off)."""

    def takes(self, user: User) -> bool:
        """Whether `user` hears there instead of by mail."""

    def send_item(self, approval: ApprovalRequest, user: User, occasion: str, now: datetime) -> bool:
        """Queue it; False if `user` no longer hears there (they are mailed instead)."""

    def send_digest(self, user: User, items: list[ApprovalRequest], *, more: bool, now: datetime) -> None: ...

    def announced(self, approval: ApprovalRequest, now: datetime) -> None:
        """The item was announced (its assignment is new): post it where admins asked."""


_channels: list[NotifyChannel] = []


def register_channel(channel: NotifyChannel) -> None:
    """Add a channel (an app's AppConfig.ready); it is asked for every reviewer mailed."""
    if channel not in _channels:
        _channels.append(channel)


def notifying() -> bool:
    """Mail is on (DESK_NOTIFY_EMAIL), or a channel is configured: the clock announces items."""
    return settings.DESK_NOTIFY_EMAIL or any(channel.active() for channel in _channels)


def channel_for(user: User) -> NotifyChannel | None:
    """Where `user` hears instead of by mail, or None: by mail."""
    return next((channel for channel in _channels if channel.takes(user)), None)


def _chain_entry(approval: ApprovalRequest) -> str:
    """The escalation chain's entry that brought the item to its current level, or ""."""
    if approval.escalation_level == 0:
        return ""
    chain = escalation_chain(approval.run.agent, approval.tool)
    return chain[approval.escalation_level - 1] if approval.escalation_level <= len(chain) else ""


def _deciders_waiting(approval: ApprovalRequest) -> list[Any]:
    """Everyone who may decide it (`deciders_of`), less those who already voted."""
    run = approval.run
    voters = [d.reviewer_id for d in approval.approving_decisions()]
    deciders = deciders_of(approval, run).exclude(pk__in=voters).order_by("username")
    return [u for u in deciders if is_reviewer(u)]


def notify_recipients(approval: ApprovalRequest) -> list[Any]:
    """Who hears of it: after an escalation (and no hand-over since) the chain entry's
    reviewers; else everyone who may decide it (its named users and groups' members, or
    every reviewer when it is open to all), less those who already voted. Never the
    submitter; only users with an email address."""
    if approval.escalation_level > 0 and approval.handed_over_at is None:
        entry = _chain_entry(approval)
        users = chain_entry_users(entry, approval.run) if entry else []
    else:
        users = _deciders_waiting(approval)
    return [user for user in users if user.email]


def assigned_by_name(approval: ApprovalRequest, user: User) -> bool:
    """Whether the item names `user` themself (a tool's route, the run's reviewers, a hand-over,
    an escalation to them): not through a group of theirs, nor as one of every reviewer."""
    name = user.get_username()
    return name in approval.assignees or _chain_entry(approval) == name


def mails_at_once(
    preference: NotificationPreference, approval: ApprovalRequest, user: User, occasion: str
) -> bool:
    """Whether `occasion` of `approval` is mailed to `user` now rather than in their digest."""
    if preference.mode == NotifyMode.OFF:
        return False
    if preference.mode == NotifyMode.EVERY:
        return True
    if occasion in (REMINDER, EXPIRING):
        return preference.immediate_expiring
    return preference.immediate_assigned and assigned_by_name(approval, user)


def _at_once(approval: ApprovalRequest, users: list[Any], occasion: str) -> list[Any]:
    preferences = preferences_of(users)
    return [u for u in users if mails_at_once(preferences[u.pk], approval, u, occasion)]


def _record(approval: ApprovalRequest, users: list[Any], occasion: str, now: datetime) -> None:
    """That these users were told of the item (a digest then leaves it out). A row there
    already (an escalation mailing one who was told before) stays as it is."""
    NotificationSent.objects.bulk_create(
        [NotificationSent(request=approval, user=u, occasion=occasion, sent_at=now) for u in users],
        ignore_conflicts=True,
    )


# --- mails at once ------------------------------------------------------------------------


def approvals_notify(*, now: datetime) -> int:
    """Announce every pending item not yet announced for its current assignment: a mail at
    once to those who want one (the rest hear in their digest); how many mails went out."""
    if not notifying():
        return 0
    sent = 0
    waiting = ApprovalRequest.objects.filter(status=ApprovalStatus.PENDING, notified_at__isnull=True)
    for approval_id, level in waiting.values_list("id", "escalation_level"):
        occasion = ESCALATED if level else CREATED
        with transaction.atomic():
            claimed = ApprovalRequest.objects.filter(
                pk=approval_id, notified_at__isnull=True, escalation_level=level
            ).update(notified_at=now)
            if claimed != 1:
                continue
            approval = ApprovalRequest.objects.select_related("run").get(pk=approval_id)
            users = _at_once(approval, notify_recipients(approval), occasion)
            _record(approval, users, occasion, now)  # with the claim: no digest lists it meanwhile
            for channel in _channels:
                channel.announced(approval, now)
        sent += _send_each(approval, users, occasion)
    return sent


def notify_send(*, approval_id: Any, occasion: str, now: datetime) -> int:
    """Mail the item's `occasion` (a reminder) to its recipients who want it at once; how many
    went out. Never raises for a mail failure: it is logged and audited."""
    if not notifying():
        return 0
    approval = ApprovalRequest.objects.select_related("run").get(pk=approval_id)
    users = _at_once(approval, notify_recipients(approval), occasion)
    _record(approval, users, occasion, now)
    return _send_each(approval, users, occasion)


def approvals_warn_expiring(*, now: datetime) -> int:
    """Mail those who asked for it of each announced item within DESK_NOTIFY_EXPIRING_SECONDS
    of its expiry, once each; how many went out."""
    if not notifying():
        return 0
    return sum(expiring_send(approval=a, users=users, now=now) for a, users in expiring_due(now=now))


def expiring_due(*, now: datetime) -> list[tuple[ApprovalRequest, list[Any]]]:
    """Each pending, announced item that expires within the window, with whom to warn: those
    who may decide it and asked for it, less any a mail at once told of it within the window."""
    window = timedelta(seconds=settings.DESK_NOTIFY_EXPIRING_SECONDS)
    soon = ApprovalRequest.objects.filter(
        status=ApprovalStatus.PENDING,
        notified_at__isnull=False,
        expires_at__gt=now,
        expires_at__lte=now + window,
    ).select_related("run")
    due = []
    for approval in soon:
        told_lately = set(
            NotificationSent.objects.filter(request=approval, sent_at__gt=approval.expires_at - window)
            .exclude(occasion=DIGEST)
            .values_list("user_id", flat=True)
        )
        users = _at_once(approval, _deciders_waiting(approval), EXPIRING)
        due.append((approval, [u for u in users if u.email and u.pk not in told_lately]))
    return due


def expiring_send(*, approval: ApprovalRequest, users: list[Any], now: datetime) -> int:
    """Warn `users` (read by `expiring_due`) that `approval` is about to expire, each once: the
    insert of their row is the claim, so of two ticks that read the same, one sends."""
    claimed = []
    for user in users:
        _, created = NotificationSent.objects.get_or_create(
            request=approval, user=user, occasion=EXPIRING, defaults={"sent_at": now}
        )
        if created:
            claimed.append(user)
    return _send_each(approval, claimed, EXPIRING, now=now)


def _send_each(
    approval: ApprovalRequest, users: list[Any], occasion: str, *, now: datetime | None = None
) -> int:
    """Send the item's notice to each user (by mail, each with their own link, or through the
    channel they hear in); how many went out."""
    sent = 0
    fact = key_fact(approval) if users else None
    for user in users:
        channel = channel_for(user)
        if channel is not None:
            with transaction.atomic():
                queued = channel.send_item(approval, user, occasion, now or timezone.now())
            if queued:
                sent += 1
                continue
        sent += mail_item(approval, user, occasion, fact=fact, now=now)
    return sent


def mail_item(
    approval: ApprovalRequest,
    user: User,
    occasion: str,
    *,
    fact: dict[str, Any] | None = None,
    now: datetime | None = None,
) -> bool:
    """Mail `user` of the item with a link of their own; whether it went (a failure is logged
    and audited). Nothing with mail off (DESK_NOTIFY_EMAIL)."""
    if not settings.DESK_NOTIFY_EMAIL:
        return False
    try:
        with transaction.atomic():
            url = link_create(approval=approval, user=user)
        _message(approval, user, url, occasion, fact, now=now).send()
    except Exception as exc:
        mail_failed(approval.pk, user, occasion, exc)
        return False
    audit_record(
        actor=None,
        action="notification.sent",
        subject_type="approval",
        subject_id=approval.pk,
        data={"to": user.get_username(), "occasion": occasion},
    )
    return True


def mail_failed(
    subject_id: Any, user: User, occasion: str, exc: Exception, subject_type: str = "approval"
) -> None:
    logger.exception(
        "%s notification of %s %s to %s failed", occasion, subject_type, subject_id, user.get_username()
    )
    audit_record(
        actor=None,
        action="notification.failed",
        subject_type=subject_type,
        subject_id=subject_id,
        data={"to": user.get_username(), "occasion": occasion, "error": f"{type(exc).__name__}: {exc}"},
    )


# --- what a mail says ---------------------------------------------------------------------


def shown(text: Any, limit: int = FACT_VALUE_MAX) -> str:
    """`text` on one line, safe to read in a mail: every control, format or otherwise invisible
    character (a line break, U+202E) written out as its escape, and so are the spaces at its
    edges ("Refund " is not "Refund"), cut at `limit` characters."""
    text = str(text)
    core = text.strip(" ")
    start = len(text) - len(text.lstrip(" "))
    out = ["\\u0020"] * start
    for char in core:
        category = unicodedata.category(char)
        if category[0] in "CZ" and char != " ":
            out.append(f"\\u{ord(char):04x}" if ord(char) <= 0xFFFF else f"\\U{ord(char):08x}")
        else:
            out.append(char)
    out += ["\\u0020"] * (len(text) - start - len(core))
    line = "".join(out)
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _holds_invisible(value: Any) -> bool:
    return shown(value, limit=10**6) != str(value)


def key_fact(approval: ApprovalRequest) -> dict[str, Any]:
    """The item at a glance, from the tool's preview: {"fact": one line, "warnings": [...]}.

    The preview's own `summary` when it gives one; else its title (up to its first comma), the
    rows named in KEY_ROWS (or its first two rows) and, for a preview that is not a message
    (no "To" row), its body's first line (a command). A value holding invisible characters is
    shown escaped and flagged."""
    if approval.kind == ApprovalKind.QUESTION:
        return {
            "fact": "The agent asks: " + shown(approval.arguments.get("question", ""), 120),
            "warnings": [],
        }
    result = approval_preview(approval, approval.arguments)
    preview = result["preview"]
    if preview is None:
        errors = [shown(e, 200) for e in result["errors"]]
        return {"fact": "No preview: judge by the arguments on its page", "warnings": errors}
    warnings = [shown(w, 200) for w in preview.get("warnings") or []]
    if preview.get("summary"):
        return {"fact": shown(preview["summary"], 200), "warnings": warnings}
    rows = [(str(label), value) for label, value in preview.get("rows") or []]
    picked = [(label, value) for label, value in rows if label in KEY_ROWS] or rows[:2]
    parts = [f"{label} {shown(value)}" for label, value in picked]
    body = preview.get("body")
    if body is not None and "To" not in dict(rows):
        first = str(body).strip().splitlines()[0] if str(body).strip() else ""
        parts.insert(0, f"`{shown(first)}`")
        picked.append(("", first))
    title = str(preview.get("title") or approval.tool).split(",")[0]
    if any(_holds_invisible(value) for _, value in picked):
        warnings.append("contains invisible characters (shown escaped)")
    return {"fact": f"{shown(title)}: " + " · ".join(parts), "warnings": warnings}


def _what(approval: ApprovalRequest) -> str:
    if approval.kind == ApprovalKind.QUESTION:
        return f"A question from {approval.run.agent}"
    return f"{approval.tool} ({approval.run.agent})"


def message_id_header() -> dict[str, str]:
    host = settings.DESK_PUBLIC_URL.split("//")[-1].split("/")[0].split(":")[0] or "reviewdesk.local"
    # Not `<run id>.…`: the demo world's emails are named that way, notifications are not.
    return {"Message-ID": f"<notify.{uuid.uuid4().hex}@{host}>"}


def expiry_line(approval: ApprovalRequest, now: datetime) -> str:
    minutes = max(0, int((approval.expires_at - now).total_seconds() // 60))
    return f"expires {approval.expires_at:%Y-%m-%d %H:%M} UTC (in {minutes} min)"


def _message(
    approval: ApprovalRequest,
    user: User,
    url: str,
    occasion: str,
    fact: dict[str, Any] | None,
    *,
    now: datetime | None = None,
) -> EmailMessage:
    fact = fact or key_fact(approval)
    minutes = max(0, int((approval.expires_at - now).total_seconds() // 60)) if now else 0
    subject = SUBJECTS[occasion].format(what=_what(approval), fact=fact["fact"], minutes=minutes)
    warnings = "".join(f"⚠ {w}\n" for w in fact["warnings"])
    body = (
        f"Hello {user.get_username()},\n\n"
        f"{_what(approval)} waits for your review:\n{fact['fact']}\n{warnings}\n"
        f"Open it on the desk (a link for you only, usable once; deciding still takes your click):\n{url}\n\n"
        f"It expires at {approval.expires_at.isoformat()}.\n\n"
        f"How and when the desk mails you: {settings.DESK_PUBLIC_URL}{reverse('settings')}\n"
    )
    return EmailMessage(
        subject=shown(f"[Review Desk] {subject}", SUBJECT_MAX),
        body=body,
        to=[user.email],
        headers=message_id_header(),
    )
