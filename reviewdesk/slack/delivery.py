"""Sending to Slack what outbox.py queued, and keeping what was posted true.

- **Nothing silently dropped.** A post that fails (Slack down, rate limited, an error) is tried
  again after DESK_SLACK_BACKOFF_SECONDS, doubling (or Slack's Retry-After), up to
  DESK_SLACK_ATTEMPTS; then its reviewer is mailed instead (`emailed`), or a channel post is
  marked `failed`. Each item's page shows admins the state of every message about it.
- **Messages stay true.** A message outbox.py marked `stale` (an item it shows changed) is
  redrawn with `chat.update`, retried as a post is. A stale button is harmless anyway: a click is judged on
  the server.
- **One worker at a time.** A task takes a message by a lease (compare-and-set on
  `leased_until`); beat's `slack.sweep` sends what is due and whose task was lost.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from slack_sdk.errors import SlackApiError

from reviewdesk.approvals.access import approval_visible_to
from reviewdesk.approvals.lifecycle.digest import digest_mail
from reviewdesk.approvals.lifecycle.notify import mail_item
from reviewdesk.approvals.models import ApprovalRequest, ApprovalStatus
from reviewdesk.audit.services import audit_record
from reviewdesk.celery import app as celery_app
from reviewdesk.slack.blocks import message_blocks
from reviewdesk.slack.client import slack_enabled, web_client
from reviewdesk.slack.models import (
    MessageKind,
    MessageState,
    SlackLink,
    SlackMessage,
)

if TYPE_CHECKING:
    pass

logger = logging.getLogger(__name__)

SEND_TASK = "slack.send"
REDRAW_TASK = "slack.redraw"
UPDATE_GAVE_UP = "update gave up: "
# A direct message redrawn for a reader who may no longer see what it showed.
GONE_TEXT = "This item is no longer yours to see here (unlinked, or handed to others). Open the desk."
LEASE_SECONDS = 60


def messages_redraw(*, approval_id: Any) -> list[str]:
    """`slack.redraw`: send each posted message that shows the item and is due."""
    due = SlackMessage.objects.filter(
        items__request_id=approval_id, state=MessageState.SENT, stale=True, due_at__lte=timezone.now()
    ).values_list("pk", flat=True)
    return [message_send(message_id=message_id) for message_id in list(due)]


# --- one attempt ----------------------------------------------------------------------------


def _lease(message_id: Any, now: datetime) -> tuple[SlackMessage, datetime] | None:
    """Take the message for one attempt, if it is due and nobody holds it: the message and the
    lease, which every write after the attempt names (a write by a worker whose lease ran out,
    and was taken by another, changes nothing)."""
    due = Q(state=MessageState.PENDING) | Q(state=MessageState.SENT, stale=True)
    lease = now + timedelta(seconds=LEASE_SECONDS)
    taken = (
        SlackMessage.objects.filter(due, pk=message_id, due_at__lte=now)
        .filter(Q(leased_until__isnull=True) | Q(leased_until__lt=now))
        .update(leased_until=lease)
    )
    if taken != 1:
        return None
    return SlackMessage.objects.select_related("user").get(pk=message_id), lease


def _held(message: SlackMessage, lease: datetime):
    return SlackMessage.objects.filter(pk=message.pk, leased_until=lease)


def _items(message: SlackMessage) -> list[ApprovalRequest]:
    order = dict(message.items.values_list("request_id", "position"))
    approvals = list(
        ApprovalRequest.objects.filter(pk__in=list(order))
        .select_related("run")
        .prefetch_related("decisions__reviewer")
    )
    return sorted(approvals, key=lambda a: order[a.pk])


def _still_theirs(message: SlackMessage, approvals: list[ApprovalRequest]) -> bool:
    """A direct message's reader may still read these items: linked (to this Slack user),
    active, and each item visible to them. Otherwise it is redrawn with nothing in it."""
    user = message.user
    if user is None:
        return True
    if not (user.is_active and SlackLink.objects.filter(user=user, slack_user_id=message.target).exists()):
        return False
    return all(approval_visible_to(user, approval) for approval in approvals)


def message_send(*, message_id: Any) -> str:
    """Post the message, or redraw it if it is posted and stale: one attempt. What happened:
    "posted", "updated", "retry", "emailed", "failed", or "skipped" (not due, or held)."""
    now = timezone.now()
    taken = _lease(message_id, now)
    if taken is None:
        return "skipped"
    message, lease = taken
    approvals = _items(message)
    posting = message.state == MessageState.PENDING
    if not slack_enabled() or (posting and not message.target):
        # Slack was turned off (or the reader unlinked) before it went: mailed instead.
        return _give_up(message, lease, "Slack is not configured, or the reader unlinked", approvals)
    if _still_theirs(message, approvals):
        text, blocks = message_blocks(approvals, digest=message.kind == MessageKind.DIGEST, more=message.more)
    else:
        text, blocks = GONE_TEXT, [{"type": "section", "text": {"type": "plain_text", "text": GONE_TEXT}}]
    client = web_client()
    try:
        if posting:
            answer = client.chat_postMessage(
                channel=message.target, text=text, blocks=blocks, unfurl_links=False
            )
        else:
            answer = client.chat_update(channel=message.channel, ts=message.ts, text=text, blocks=blocks)
    except Exception as exc:  # SlackApiError, a timeout, a refused connection: all retried
        return _failed_attempt(message, lease, exc, posting=posting, approvals=approvals)
    fields: dict[str, Any] = {"leased_until": None, "last_error": "", "update_attempts": 0}
    if posting:
        fields.update(
            state=MessageState.SENT,
            channel=str(answer.get("channel") or message.target),
            ts=str(answer.get("ts") or ""),
            sent_at=timezone.now(),
            attempts=message.attempts + 1,
        )
    else:
        fields["updated_at"] = timezone.now()
    with transaction.atomic():
        _held(message, lease).update(**fields)
        # Drawn as of `message.revision`: a change since then moved it, and keeps it stale.
        SlackMessage.objects.filter(pk=message.pk, revision=message.revision).update(stale=False)
    if SlackMessage.objects.filter(pk=message.pk, stale=True).exists():
        celery_app.send_task(SEND_TASK, args=[str(message.pk)])
    if posting:
        audit_record(
            actor=None,
            action="notification.slack_sent",
            subject_type="slack_message",
            subject_id=message.pk,
            data={
                "to": message.user.get_username() if message.user else message.target,
                "approvals": [str(a.pk) for a in approvals],
                "occasion": message.occasion,
            },
        )
    return "posted" if posting else "updated"


def _retry_after(exc: Exception) -> float | None:
    if isinstance(exc, SlackApiError) and exc.response is not None and exc.response.status_code == 429:
        try:
            return (
                float(exc.response.headers.get("Retry-After") or exc.response.headers.get("retry-after") or 0)
                or None
            )
        except (TypeError, ValueError):
            return None
    return None


def _failed_attempt(
    message: SlackMessage, lease: datetime, exc: Exception, *, posting: bool, approvals: list[ApprovalRequest]
) -> str:
    error = f"{type(exc).__name__}: {exc}"[:500]
    logger.warning("slack message %s: attempt failed: %s", message.pk, type(exc).__name__)
    tried = (message.attempts if posting else message.update_attempts) + 1
    counter = "attempts" if posting else "update_attempts"
    if tried < settings.DESK_SLACK_ATTEMPTS:
        wait = _retry_after(exc) or settings.DESK_SLACK_BACKOFF_SECONDS * 2 ** (tried - 1)
        _held(message, lease).update(
            **{counter: tried},
            last_error=error,
            leased_until=None,
            due_at=timezone.now() + timedelta(seconds=wait),
        )
        # A little after due_at: a task that came early would find it not due yet.
        celery_app.send_task(SEND_TASK, args=[str(message.pk)], countdown=wait + 0.2)
        return "retry"
    if not posting:
        # The update could not go (the message deleted, the channel archived, Slack down for
        # long): the message still shows the item as it was, and its buttons are judged on the
        # server. Given up, and said so to admins on the item's page.
        _held(message, lease).update(
            update_attempts=tried, last_error=f"{UPDATE_GAVE_UP}{error}"[:500], leased_until=None, stale=False
        )
        return "failed"
    return _give_up(message, lease, error, approvals)


def _give_up(message: SlackMessage, lease: datetime, error: str, approvals: list[ApprovalRequest]) -> str:
    """Every attempt failed: its reviewer is mailed instead (what is still pending and still
    theirs), or, a channel post, it is marked failed. Audited either way. The state moves to
    "failed" first, under the lease, as the claim: of two workers one mails, and a crash after
    the mail never mails again (no worker takes a failed message). "emailed" follows the mail,
    so "failed" is briefly seen while it goes."""
    user = message.user
    if not _held(message, lease).update(
        state=MessageState.FAILED, attempts=message.attempts + 1, last_error=error
    ):
        return "skipped"
    still = [
        a
        for a in approvals
        if a.status == ApprovalStatus.PENDING
        and user is not None
        and user.is_active
        and approval_visible_to(user, a)
    ]
    mailed = False
    if user is not None and user.email and still:
        if message.kind == MessageKind.DIGEST:
            mailed = digest_mail(user=user, items=still, more=message.more, now=timezone.now())
        else:
            mailed = mail_item(still[0], user, message.occasion or "created", now=timezone.now())
    state = MessageState.EMAILED if mailed else MessageState.FAILED
    SlackMessage.objects.filter(pk=message.pk).update(state=state, leased_until=None)
    audit_record(
        actor=None,
        action="notification.slack_failed",
        subject_type="slack_message",
        subject_id=message.pk,
        data={
            "to": user.get_username() if user else message.target,
            "approvals": [str(a.pk) for a in approvals],
            "error": error,
            "fallback": "email" if mailed else "none",
        },
    )
    return str(state)


def slack_sweep() -> dict[str, int]:
    """Beat: send what is due and nobody holds (a retry's task, or one lost with Redis). With
    Slack turned off, what waits to be posted is mailed instead."""
    now = timezone.now()
    if not slack_enabled():
        waiting = list(
            SlackMessage.objects.filter(state=MessageState.PENDING).values_list("pk", flat=True)[:200]
        )
        return {"due": len([message_send(message_id=message_id) for message_id in waiting])}
    due = (
        SlackMessage.objects.filter(Q(state=MessageState.PENDING) | Q(state=MessageState.SENT, stale=True))
        .filter(due_at__lte=now - timedelta(seconds=settings.DESK_SLACK_BACKOFF_SECONDS))
        .filter(Q(leased_until__isnull=True) | Q(leased_until__lt=now))
        .values_list("pk", flat=True)[:200]
    )
    ids = list(due)
    for message_id in ids:
        celery_app.send_task(SEND_TASK, args=[str(message_id)])
    return {"due": len(ids)}


def delivery_rows(approval: ApprovalRequest) -> list[dict[str, Any]]:
    """Each Slack message about the item, for admins on its page: to whom, its state, tries."""
    messages = (
        SlackMessage.objects.filter(items__request=approval).select_related("user").order_by("created_at")
    )
    return [
        {
            "kind": m.kind,
            "to": m.user.get_username() if m.user else f"channel {m.target}",
            "state": "update pending"
            if m.stale
            else ("update failed" if m.last_error.startswith(UPDATE_GAVE_UP) else m.state),
            "attempts": m.attempts,
            "last_error": m.last_error,
            "sent_at": m.sent_at,
        }
        for m in messages
    ]
