"""Write desk events in the caller's transaction; push them to chosen groups on commit."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

from reviewdesk.db import serialize_writers
from reviewdesk.events.models import DeskEvent

logger = logging.getLogger(__name__)

REVIEWERS_GROUP = "desk.reviewers"
ADMINS_GROUP = "desk.admins"


def user_group(user_id: int) -> str:
    return f"desk.user.{user_id}"


def groups_for(audience: Iterable[int]) -> list[str]:
    """Explicit recipients: assigned users and admins, or every reviewer."""
    audience = list(audience)
    if not audience:
        return [REVIEWERS_GROUP]
    return [user_group(user_id) for user_id in audience] + [ADMINS_GROUP]


def event_emit(*, type: str, data: dict, run_id=None, audience: Iterable[int] = ()) -> DeskEvent:
    """Record an event in the current transaction and push it once that commits."""
    assert transaction.get_connection().in_atomic_block, "event_emit needs a transaction"
    serialize_writers("desk-events")
    event = DeskEvent.objects.create(type=type, data=data, run_id=run_id, audience=list(audience))
    transaction.on_commit(lambda: event_push(event), robust=True)
    return event


def event_push(event: DeskEvent) -> None:
    # The channel layer is at-most-once; clients recover missed events by replay.
    layer = get_channel_layer()
    message = {"type": "desk.event", "event": event.as_message()}
    for group in groups_for(event.audience):
        try:
            async_to_sync(layer.group_send)(group, message)
        except Exception:
            logger.exception("push of desk event %s to %s failed", event.id, group)


def latest_seq() -> int:
    return DeskEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0


def events_visible_after(*, user, after: int, limit: int = 500) -> list[DeskEvent]:
    """Events after `after` that `user` may see (filtered here; audiences are small lists)."""
    rows = DeskEvent.objects.filter(id__gt=after).order_by("id")[:limit]
    if user.is_staff:
        return list(rows)
    return [row for row in rows if not row.audience or user.id in row.audience]
