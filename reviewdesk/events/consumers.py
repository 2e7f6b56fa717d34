"""`/ws/desk/`: reviewers only; snapshot on connect, sequenced events, replay, heartbeat."""

from __future__ import annotations

import asyncio
import contextlib

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from reviewdesk.accounts.roles import is_admin, is_reviewer
from reviewdesk.approvals.selectors import approvals_pending_for
from reviewdesk.events.builders import approval_data
from reviewdesk.events.services import (
    ADMINS_GROUP,
    REVIEWERS_GROUP,
    events_visible_after,
    latest_seq,
    user_group,
)

CLOSE_FORBIDDEN = 4403


@database_sync_to_async
def _may_connect(user) -> tuple[bool, bool]:
    return is_reviewer(user) or is_admin(user), is_admin(user)


@database_sync_to_async
def _snapshot(user) -> dict:
    # Read the sequence first: anything committed after it arrives as a delta.
    seq = latest_seq()
    return {
        "seq": seq,
        "type": "snapshot",
        "data": {"approvals": [approval_data(a) for a in approvals_pending_for(user)]},
    }


@database_sync_to_async
def _replay_page(user, after: int) -> tuple[list[dict], dict]:
    page = events_visible_after(user=user, after=after)
    # `seq` is what the page covers, not the latest now: a client that moved its mark to
    # the latest would skip whatever the page left out or committed after the scan.
    done = {"seq": page.seq, "type": "replay.done", "data": {"after": after, "more": page.more}}
    return [event.as_message() for event in page.events], done


class DeskConsumer(AsyncJsonWebsocketConsumer):
    groups: list[str]

    async def connect(self) -> None:
        self.user = self.scope.get("user")
        self.groups = []
        self.heartbeat = None
        if not (self.user and self.user.is_authenticated):
            await self.close(code=CLOSE_FORBIDDEN)
            return
        allowed, admin = await _may_connect(self.user)
        if not allowed:
            await self.close(code=CLOSE_FORBIDDEN)
            return
        # Join before reading the snapshot, so nothing falls between the two.
        self.groups = [REVIEWERS_GROUP, user_group(self.user.pk)] + ([ADMINS_GROUP] if admin else [])
        for group in self.groups:
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()
        await self.send_json(await _snapshot(self.user))
        self.heartbeat = asyncio.create_task(self._beat())

    async def disconnect(self, code) -> None:
        if self.heartbeat:
            self.heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.heartbeat
        for group in self.groups:
            await self.channel_layer.group_discard(group, self.channel_name)

    async def receive_json(self, content, **kwargs) -> None:
        if not isinstance(content, dict) or content.get("type") != "replay":
            await self.send_json(
                {"type": "error", "data": {"detail": "expected {'type': 'replay', 'after': SEQ}"}}
            )
            return
        try:
            after = int(content.get("after", 0))
        except (TypeError, ValueError):
            await self.send_json({"type": "error", "data": {"detail": "after must be an integer"}})
            return
        events, done = await _replay_page(self.user, after)
        for event in events:
            await self.send_json(event)
        await self.send_json(done)

    async def desk_event(self, message) -> None:
        await self.send_json(message["event"])

    async def _beat(self) -> None:
        # The latest sequence lets a client notice a lost *last* event and replay.
        while True:
            await asyncio.sleep(settings.DESK_WS_HEARTBEAT_SECONDS)
            seq = await database_sync_to_async(latest_seq)()
            await self.send_json({"seq": seq, "type": "heartbeat", "data": {}})
