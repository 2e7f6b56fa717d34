"""Write desk events in the caller's transaction; push them to chosen groups on commit."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

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


# How many event rows one replay scans; a client pages on while `more` is true.
REPLAY_PAGE_SIZE = 500


@dataclass(frozen=True)
class ReplayPage:
    """The events in (after, seq] that a user may see, and whether more follow `seq`."""

    events: list[DeskEvent]
    seq: int
    more: bool


def latest_seq() -> int:
    return DeskEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0


def events_visible_after(*, user, after: int, limit: int | None = None) -> ReplayPage:
    """One page of the events after `after` that `user` may see, and the sequence it covers.

    The end is read before the rows: writers serialise, so ids are commit order and
    every id up to it has committed; an event committing later arrives as a push or
    in the next replay. A page scans at most `limit` rows (visible or not); when it
    stops short of the end, `seq` is the last id scanned and `more` is true.
    """
    limit = limit or REPLAY_PAGE_SIZE
    end = latest_seq()
    rows = list(DeskEvent.objects.filter(id__gt=after, id__lte=end).order_by("id")[:limit])
    more = len(rows) == limit and rows[-1].id < end
    seq = rows[-1].id if more else end
    # Filtered here: audiences are short lists of user ids, empty meaning every reviewer.
    visible = rows if user.is_staff else [row for row in rows if not row.audience or user.id in row.audience]
    return ReplayPage(events=visible, seq=seq, more=more)
