"""`/ws/desk/`: reviewers only; snapshot on connect (and when asked), sequenced events, replay,
heartbeat."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.db import DatabaseError

from reviewdesk.accounts.authentication import session_user_now
from reviewdesk.accounts.roles import is_admin, is_reviewer
from reviewdesk.approvals.reads.queue import (
    QUEUE_PAGE_SIZE,
    QueueFilters,
    approvals_queue_for,
    queue_matches,
    queue_sort_key,
    queue_view_from,
)
from reviewdesk.approvals.reads.representation import approvals_data, message_for
from reviewdesk.desk.cards import with_desk_view
from reviewdesk.events.services import (
    ADMINS_GROUP,
    REVIEWERS_GROUP,
    events_visible_after,
    latest_seq,
    user_group,
)

logger = logging.getLogger(__name__)

CLOSE_FORBIDDEN = 4403
# Sequence numbers are a database bigint: anything outside is not a position in the stream.
MAX_SEQ = 2**63 - 1
_DEFAULT_PORTS = {"http": 80, "https": 443}


# --- who may hold the socket: origin, and rights re-checked while it is open ------


def _origin_key(value: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an origin such as "https://desk.example.com:8443"; None if malformed."""
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:
        return None
    scheme, host = parts.scheme.lower(), (parts.hostname or "")
    if (
        scheme not in _DEFAULT_PORTS
        or not host
        or parts.username
        or parts.password
        or parts.path not in ("", "/")
    ):
        return None
    return scheme, host.lower(), port if port is not None else _DEFAULT_PORTS[scheme]


def origin_allowed(origin: str | None, allowed: list[str]) -> bool:
    """Whether `origin` is exactly one of `allowed`: same scheme, host and port (80/443 implied)."""
    key = _origin_key(origin) if origin else None
    return key is not None and any(key == _origin_key(entry) for entry in allowed)


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


@database_sync_to_async
def _rights_now(user_pk: Any, session_key: str | None) -> tuple[bool, bool]:
    """(may hold the desk socket, is admin) now: the session still logs this user in (not
    logged out, password unchanged) and the user is still an active reviewer or admin."""
    user = session_user_now(user_pk, session_key)
    if user is None:
        return False, False
    return is_reviewer(user) or is_admin(user), is_admin(user)


def replay_after(content: Any) -> int | None:
    """The `after` of a replay request, or None when it is not an integer sequence (1e400, "7",
    true, -1, 2**70): a bad frame gets an error message, never a closed socket."""
    after = content.get("after", 0)
    if type(after) is not int or not 0 <= after <= MAX_SEQ:
        return None
    return after


@database_sync_to_async
def _may_connect(user) -> tuple[bool, bool]:
    return is_reviewer(user) or is_admin(user), is_admin(user)


def snapshot_view(scope: Mapping[str, Any]) -> tuple[QueueFilters, int]:
    """Which page of the queue the socket's snapshot holds: the one its URL's query names, as
    the desk page's (`?agent=&tool=&run=&assignee=&offset=`); by default the first, unfiltered."""
    query = scope.get("query_string", b"").decode("latin-1")
    try:
        params = dict(parse_qsl(query, max_num_fields=20))
    except ValueError:  # more fields than any page sends: read it as the first page
        params = {}
    return queue_view_from(params)


# `/ws/desk/?events=approvals`: the desk page's socket. The page applies approval events only,
# so the socket sends no others: a `run.updated` to every reviewer at each step of every run
# was most of what 200 open desks received (`make bench` #8). What it skips it vouches for.
APPROVALS_ONLY = "approvals"


def approvals_only(scope: Mapping[str, Any]) -> bool:
    """Whether the socket's URL asks for approval events only (`events=approvals`)."""
    query = scope.get("query_string", b"").decode("latin-1")
    try:
        params = dict(parse_qsl(query, max_num_fields=20))
    except ValueError:
        return False
    return params.get("events") == APPROVALS_ONLY


class Coverage:
    """The run of sequence numbers that has reached one socket without a gap, whether each
    event was sent or skipped: (start, end]. Events come in commit order from each writer, so
    a number past `end + 1` is a gap (another user's event, one still in flight, or one lost)
    and the run starts again with it; one at or below `end` is a late or second copy.

    A message the socket sends may carry `after`: every event after `after` up to the message's
    `seq` (the message's own event aside) has reached this socket, so a client whose last
    sequence is at least `after` misses nothing it may see by moving its mark to `seq`.

    Two writers (the web's commit, a worker's) can publish out of commit order, so the latest
    gap is held: when its missing numbers all arrive late, the runs either side join again.
    Without that, a worker's event overtaking the web's one made the page replay."""

    MAX_HELD_GAP = 64  # a wider gap is rarely filled late; it is not worth remembering

    def __init__(self, seq: int) -> None:
        self.start = self.end = seq
        self.held: tuple[int, set[int]] | None = None  # (start of the run before the gap, its holes)

    def add(self, seq: int) -> None:
        if seq == self.end + 1:
            self.end = seq
        elif seq > self.end + 1:
            holes = set(range(self.end + 1, seq))
            self.held = (self.start, holes) if len(holes) <= self.MAX_HELD_GAP else None
            self.start, self.end = seq - 1, seq
        elif self.held and seq in self.held[1]:
            start, holes = self.held
            holes.discard(seq)
            if not holes:  # the gap was only late: one unbroken run again
                self.start, self.held = start, None

    def after(self, seq: int) -> int | None:
        """`after` for event `seq`, not yet added: None unless it follows the run directly and
        the run vouches for more than the client's `seq - 1` rule would."""
        return self.start if seq == self.end + 1 and self.start < self.end else None

    def after_through(self, seq: int) -> int | None:
        """`after` for a heartbeat at `seq`: None unless every event up to `seq` is in the run."""
        return self.start if self.start < seq <= self.end else None


@database_sync_to_async
def _snapshot(user, view: tuple[QueueFilters, int] = (QueueFilters(), 0)) -> dict:
    """One page of the user's pending approvals, in the desk's order, and how many there are.

    A window, not the whole queue: with 10,000 pending the snapshot stays one page. `total`
    counts every approval pending for the user (filters aside, the desk's count), `matching`
    those the filters keep, and `more` says whether matching ones follow the window. Counts stop
    at QUEUE_COUNT_CAP: `total_capped` / `matching_capped` say there are more ("1000+").
    """
    # Read the sequence first: anything committed after it arrives as a delta.
    seq = latest_seq()
    filters, offset = view
    page = approvals_queue_for(user, filters, offset=offset)
    return {
        "seq": seq,
        "type": "snapshot",
        "data": {
            "approvals": with_desk_view(
                approvals_data(page.approvals), username=user.get_username(), sort=filters.sort
            ),
            "total": page.total,
            "total_capped": page.total_capped,
            "matching": page.matching,
            "matching_capped": page.matching_capped,
            "offset": page.offset,
            "limit": QUEUE_PAGE_SIZE,
            "more": page.next_offset is not None,
        },
    }


@database_sync_to_async
def _replay_page(user, after: int) -> tuple[list[dict], dict]:
    page = events_visible_after(user=user, after=after)
    # `seq` is what the page covers, not the latest now: a client that moved its mark to
    # the latest would skip whatever the page left out or committed after the scan.
    done = {"seq": page.seq, "type": "replay.done", "data": {"after": after, "more": page.more}}
    username, admin = user.get_username(), is_admin(user)
    return [message_for(event.as_message(), username=username, admin=admin) for event in page.events], done


class DeskConsumer(AsyncJsonWebsocketConsumer):
    groups: list[str]

    async def connect(self) -> None:
        self.user = self.scope.get("user")
        self.groups = []
        self.heartbeat = None
        self.coverage: Coverage | None = None  # approvals only: what reached this socket
        # The desk page's socket (`events=approvals`): its approval events carry their place
        # in the page's queue (`_placed`), for the view its URL names.
        self.desk_page = approvals_only(self.scope)
        self.view = snapshot_view(self.scope)
        if not (self.user and self.user.is_authenticated):
            await self.close(code=CLOSE_FORBIDDEN)
            return
        if not origin_allowed(_header(self.scope, b"origin"), settings.DESK_WS_ALLOWED_ORIGINS):
            await self.close(code=CLOSE_FORBIDDEN)
            return
        session = self.scope.get("session")
        self.session_key = getattr(session, "session_key", None)
        allowed, admin = await _may_connect(self.user)
        self.admin = admin
        if not allowed:
            await self.close(code=CLOSE_FORBIDDEN)
            return
        # Join before reading the snapshot, so nothing falls between the two.
        self.groups = [REVIEWERS_GROUP, user_group(self.user.pk)] + ([ADMINS_GROUP] if admin else [])
        for group in self.groups:
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()
        snapshot = await _snapshot(self.user, self.view)
        await self.send_json(snapshot)
        if approvals_only(self.scope):
            self.coverage = Coverage(snapshot["seq"])
        self.heartbeat = asyncio.create_task(self._beat())

    async def disconnect(self, code) -> None:
        if self.heartbeat:
            self.heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.heartbeat
        for group in self.groups:
            await self.channel_layer.group_discard(group, self.channel_name)

    async def receive(self, text_data=None, bytes_data=None, **kwargs) -> None:
        """Parse a frame; one that is not a JSON text gets an error message, not a closed socket."""
        if text_data is None:
            await self._error("frames must be JSON text")
            return
        try:
            content = json.loads(text_data)
        except (ValueError, RecursionError):
            await self._error("the frame is not valid JSON")
            return
        await self.receive_json(content, **kwargs)

    async def _error(self, detail: str) -> None:
        await self.send_json({"type": "error", "data": {"detail": detail}})

    async def _still_allowed(self) -> bool:
        """Re-check the user's rights; close the socket when they are gone (or changed)."""
        allowed, admin = await _rights_now(self.user.pk, self.session_key)
        if allowed and admin == self.admin:
            return True
        # Rights changed: a client with the reviewer role still reconnects and gets its new groups.
        await self.close(code=CLOSE_FORBIDDEN)
        return False

    async def receive_json(self, content, **kwargs) -> None:
        kind = content.get("type") if isinstance(content, dict) else None
        if kind == "snapshot":
            # The page cannot tell whether a call it had not seen was in its count (handed over
            # or escalated to this reviewer from elsewhere): the window and the count, read now.
            if await self._still_allowed():
                await self.send_json(await _snapshot(self.user, snapshot_view(self.scope)))
            return
        if kind != "replay":
            await self._error("expected {'type': 'replay', 'after': SEQ} or {'type': 'snapshot'}")
            return
        after = replay_after(content)
        if after is None:
            await self._error(f"after must be an integer from 0 to {MAX_SEQ}")
            return
        if not await self._still_allowed():
            return
        events, done = await _replay_page(self.user, after)
        for event in events:
            await self.send_json(self._placed(event))
        await self.send_json(done)

    async def dispatch(self, message) -> None:
        """As Channels' own, but a desk event goes straight to its handler.

        Channels hops to the sync thread before every handler (`aclose_old_connections`), and
        under daphne that thread is one per process, shared with every sync view. A push to 100
        sockets was 100 hops in a row, queued behind whatever request held the thread, for a
        handler that touches no database (`make bench` #8). Every handler here that does
        reads through `database_sync_to_async`, which closes old connections around itself.
        """
        if message.get("type") == "desk.event":
            await self.desk_event(message)
            return
        await super().dispatch(message)

    async def desk_event(self, message) -> None:
        event = message_for(message["event"], username=self.user.get_username(), admin=self.admin)
        event = self._placed(event)
        coverage = self.coverage
        if coverage is None:
            await self.send_json(event)
            return
        seq = event["seq"]
        if not event["type"].startswith("approval."):
            coverage.add(seq)  # skipped: the next message this socket sends vouches for it
            return
        after = coverage.after(seq)
        await self.send_json(event if after is None else {**event, "after": after})
        # Only once it is on its way: a heartbeat must not vouch for an event still unsent.
        coverage.add(seq)

    def _placed(self, event: dict) -> dict:
        """An approval event as the desk page's socket sends it: its data with "desk", the
        call's place in this reviewer's queue (`sort_key`) and whether it passes this page's
        filters (`matches`), by the Python that orders and filters the page (no database read:
        the preview comes from the card endpoint, for the cards the page draws)."""
        data = event.get("data")
        if not self.desk_page or not data or not event["type"].startswith("approval.") or "id" not in data:
            return event
        username = self.user.get_username()
        filters, _ = self.view
        placed = {
            "sort_key": queue_sort_key(data, username, sort=filters.sort),
            "matches": queue_matches(data, filters, username),
        }
        return {**event, "data": {**data, "desk": placed}}

    async def desk_recheck(self, message) -> None:
        """A session ended or a role changed somewhere (events/signals.py): check this socket's now."""
        try:
            await self._still_allowed()
        except DatabaseError:  # the heartbeat checks again
            logger.warning("desk socket recheck skipped: database unavailable", exc_info=True)

    async def _beat(self) -> None:
        # The latest sequence lets a client notice a lost *last* event and replay.
        while True:
            await asyncio.sleep(settings.DESK_WS_HEARTBEAT_SECONDS)
            try:
                if not await self._still_allowed():  # logged out, or no longer a reviewer
                    return
                seq = await database_sync_to_async(latest_seq)()
            except DatabaseError:
                # A database hiccup (SQLite busy, a failover) must not drop every reviewer's
                # socket and force a reconnect storm: skip this beat, check again at the next.
                logger.warning("desk socket heartbeat skipped: database unavailable", exc_info=True)
                continue
            beat: dict[str, Any] = {"seq": seq, "type": "heartbeat", "data": {}}
            after = self.coverage.after_through(seq) if self.coverage else None
            if after is not None:
                beat["after"] = after  # the skipped tail: no replay needed for it
            await self.send_json(beat)
