"""What goes to Slack, and what is to be redrawn: the queue side of Slack (delivery.py sends).

- A reviewer with a link (`SlackLink.notify`) gets in Slack what the desk would mail them, at
  the same moments: notify.py and digest.py call `SLACK_CHANNEL`, their `NotifyChannel`.
- An item is posted to a group's channel where an admin set one (`SlackChannel`) when it is
  announced, once per channel.
- Each is a `SlackMessage` row written in the transaction that claims the notification, and a
  `slack.send` task enqueued once that commits.
- When an item changes (decided anywhere, a quorum vote, expired, cancelled), every message
  that shows it is marked `stale` in the transaction that writes the change
  (`stale_on_decision`, a desk-event hook), and `slack.redraw` sends it again.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.db.models import Case, F, Value, When
from django.utils import timezone

from reviewdesk.approvals.lifecycle.notify import DIGEST
from reviewdesk.approvals.models import ApprovalRequest
from reviewdesk.celery import app as celery_app
from reviewdesk.slack.client import slack_enabled
from reviewdesk.slack.delivery import REDRAW_TASK, SEND_TASK
from reviewdesk.slack.models import (
    MessageKind,
    MessageState,
    SlackChannel,
    SlackLink,
    SlackMessage,
    SlackMessageItem,
)

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from reviewdesk.events.models import DeskEvent

# A Slack message holds 50 blocks (more is refused as invalid_blocks): a digest is its header,
# per item a divider and up to 6 blocks (a command's line and a note make 6), and when more wait
# a divider and that line: 1 + 6 x 7 + 2 = 45.
DIGEST_ITEMS_MAX = 6


class _SlackChannel:
    """notify.py's `NotifyChannel` for Slack."""

    digest_max = DIGEST_ITEMS_MAX

    def active(self) -> bool:
        return slack_enabled()

    def takes(self, user: User) -> bool:
        return slack_enabled() and _dm_link(user) is not None

    def send_item(self, approval: ApprovalRequest, user: User, occasion: str, now: datetime) -> bool:
        link = _dm_link(user)  # unlinked since `takes`: mailed instead
        if link is None:
            return False
        message_queue(
            MessageKind.ITEM, [approval], target=link.slack_user_id, user=user, occasion=occasion, now=now
        )
        return True

    def send_digest(self, user: User, items: list[ApprovalRequest], *, more: bool, now: datetime) -> None:
        link = _dm_link(user)
        # Unlinked since `takes`: the message waits for no one and is mailed by the sweep.
        target = link.slack_user_id if link is not None else ""
        message_queue(
            MessageKind.DIGEST, items, target=target, user=user, occasion=DIGEST, now=now, more=more
        )

    def announced(self, approval: ApprovalRequest, now: datetime) -> None:
        if not slack_enabled():
            return
        # An escalation or a hand-over announces it again: a channel that has it posted keeps
        # that post (redrawn as the item changes), not a second one.
        posted = set(
            SlackMessage.objects.filter(kind=MessageKind.CHANNEL, items__request=approval).values_list(
                "target", flat=True
            )
        )
        for channel_id in channels_for(approval):
            if channel_id not in posted:
                message_queue(
                    MessageKind.CHANNEL, [approval], target=channel_id, user=None, occasion="created", now=now
                )


def _dm_link(user: User) -> SlackLink | None:
    return SlackLink.objects.filter(user=user, notify=True, user__is_active=True).first()


SLACK_CHANNEL = _SlackChannel()


def channels_for(approval: ApprovalRequest) -> list[str]:
    """The channels an admin set for the groups the item names (or, open to every reviewer,
    the channel for those)."""
    groups = [t.split(":", 1)[1] for t in approval.assignees if t.startswith("group:")]
    if not approval.assignees:
        rows = SlackChannel.objects.filter(group__isnull=True)
    elif groups:
        rows = SlackChannel.objects.filter(group__name__in=groups)
    else:
        return []
    return sorted(set(rows.values_list("channel_id", flat=True)))


def message_queue(
    kind: str,
    approvals: list[ApprovalRequest],
    *,
    target: str,
    user: User | None,
    occasion: str,
    now: datetime,
    more: bool = False,
) -> SlackMessage:
    """A message to post, written in the caller's transaction, its task sent once it commits."""
    message = SlackMessage.objects.create(
        kind=kind, user=user, occasion=occasion, target=target, due_at=now, more=more
    )
    SlackMessageItem.objects.bulk_create(
        [SlackMessageItem(message=message, request=a, position=i) for i, a in enumerate(approvals)]
    )
    _send_on_commit(message.pk)
    return message


def _send_on_commit(message_id: Any, countdown: float = 0) -> None:
    transaction.on_commit(
        lambda: celery_app.send_task(SEND_TASK, args=[str(message_id)], countdown=countdown), robust=True
    )


def stale_on_decision(event: DeskEvent) -> None:
    """A desk-event hook (events.services.on_event_written), in the writer's transaction: an
    item changed, so every message that shows it is to be redrawn. One statement (none when
    Slack is off, or for another event), and one task once it commits. A posted message is due
    now; one still waiting to be posted keeps its backoff (it is drawn as it stands when it goes)."""
    if event.type != "approval.updated" or not slack_enabled():
        return
    approval_id = (event.data or {}).get("id")
    if not approval_id:
        return
    marked = SlackMessage.objects.filter(
        items__request_id=approval_id, state__in=(MessageState.PENDING, MessageState.SENT)
    ).update(
        stale=True,
        revision=F("revision") + 1,
        update_attempts=0,
        due_at=Case(When(state=MessageState.SENT, then=Value(timezone.now())), default=F("due_at")),
    )
    if marked:
        transaction.on_commit(lambda: celery_app.send_task(REDRAW_TASK, args=[str(approval_id)]), robust=True)
