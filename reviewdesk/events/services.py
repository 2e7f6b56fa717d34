"""Write desk events in the caller's transaction; push them to chosen groups on commit; replay
them after a sequence number. The transport only: who is told what is built by the apps that
own it and handed to `event_emit`, and a reader of the log elsewhere (webhooks) is woken
through `on_event_written`."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

from reviewdesk.events.models import DeskEvent
from reviewdesk.events.publish import publisher_for
from reviewdesk.events.rows import event_insert
from reviewdesk.lib.db import append_later, serialize_writers

if TYPE_CHECKING:
    from django.contrib.auth.models import User

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


def event_emit(*, type: str, data: dict, run_id=None, audience: Iterable[int] = ()) -> DeskEvent | None:
    """Record an event in the current transaction and push it once that commits. In an
    `atomic_appends_last` block the row is written at the block's end (and None returned)."""
    assert transaction.get_connection().in_atomic_block, "event_emit needs a transaction"
    event = DeskEvent(type=type, data=dict(data), run_id=run_id, audience=list(audience))
    if append_later(lambda: _event_write(event), after_commit=event_push):
        return None
    _event_write(event, push=True)
    return event


def _event_write(event: DeskEvent, *, push: bool = False) -> DeskEvent:
    """Insert the event under the writers' lock (ids are then commit order, which replays and
    the webhooks' cursor rely on); push it on commit when `push`."""
    serialize_writers()
    event_insert(event)
    if push:
        transaction.on_commit(lambda: event_push(event), robust=True)
    for hook in _written_hooks:
        hook(event)
    return event


_written_hooks: list[Callable[[DeskEvent], None]] = []


def on_event_written(hook: Callable[[DeskEvent], None]) -> None:
    """Call `hook(event)` in the writer's transaction, just after each desk event is inserted
    (under the writers' lock, so keep it to one cheap read): for a reader of the log elsewhere
    that should be woken once the event commits (it registers its own `transaction.on_commit`).
    An app registers it in its AppConfig.ready; the reader still catches up on its own."""
    if hook not in _written_hooks:
        _written_hooks.append(hook)


def _send(layer, group: str, message: dict) -> None:
    """Send `message` to `group` from sync code; return once Redis has it, so pushes leave in
    commit order. On the desk's pub/sub layer the calling thread publishes itself, with no hop
    to an event loop (`events/publish.py`); any other layer gets Channels' `async_to_sync`."""
    publisher = publisher_for(layer)
    if publisher is not None:
        publisher.group_send(group, message)
    else:
        async_to_sync(layer.group_send)(group, message)


def event_push(event: DeskEvent) -> None:
    # The channel layer is at-most-once; clients recover missed events by replay. Each send is
    # awaited before the next, so pushes leave in commit order as before.
    layer = get_channel_layer()
    assert layer is not None, "CHANNEL_LAYERS is configured in settings"
    message = {"type": "desk.event", "event": event.as_message()}
    for group in groups_for(event.audience):
        try:
            _send(layer, group, message)
        except Exception:
            logger.exception("push of desk event %s to %s failed", event.id, group)


# After a failed user push, skip the next ones for a while: `manage.py seed_demo` saves users
# before `make run` starts Redis, and one warning says more than a traceback per user.
_users_push_paused_until = 0.0
USERS_PUSH_PAUSE_SECONDS = 30.0


def users_push(user_ids: Iterable[int], message: dict) -> None:
    """Send `message` (a channel-layer message, not a desk event) to each user's sockets.

    Best effort: sockets re-check at their next heartbeat anyway."""
    global _users_push_paused_until
    if time.monotonic() < _users_push_paused_until:
        return
    layer = get_channel_layer()
    assert layer is not None, "CHANNEL_LAYERS is configured in settings"
    for user_id in user_ids:
        try:
            _send(layer, user_group(user_id), message)
        except Exception as exc:
            _users_push_paused_until = time.monotonic() + USERS_PUSH_PAUSE_SECONDS
            logger.warning(
                "desk sockets not told to %s (the channel layer is unreachable: %s); they re-check "
                "at their next heartbeat",
                message.get("type"),
                str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__,
            )
            return


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


def events_visible_after(*, user: User, after: int, limit: int | None = None) -> ReplayPage:
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
