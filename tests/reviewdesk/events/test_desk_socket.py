"""/ws/desk/ through the real ASGI stack and the Redis channel layer (no in-memory layer)."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator
from django.db import connections
from django.test import Client

from reviewdesk.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)

ORIGIN = (b"origin", b"http://127.0.0.1")


def session_headers(user) -> list[tuple[bytes, bytes]]:
    client = Client()
    client.force_login(user)
    return [(b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode()), ORIGIN]


def communicator(headers) -> WebsocketCommunicator:
    return WebsocketCommunicator(application, "/ws/desk/", headers=headers)


def in_thread(fn):
    """Run `fn` in a worker thread (so on_commit pushes reach the socket) and close its DB connection."""

    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        finally:
            connections.close_all()

    return sync_to_async(call, thread_sensitive=False)


async def receive_until(comm: WebsocketCommunicator, type_: str, timeout: float = 10) -> dict:
    """Next message of `type_`, skipping heartbeats and other types."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            raise AssertionError(f"no {type_} within {timeout}s")
        try:
            message = await comm.receive_json_from(timeout=remaining)
        except TimeoutError:
            raise AssertionError(f"no {type_} within {timeout}s") from None
        if message["type"] == type_:
            return message


def test_an_anonymous_socket_is_refused():
    async def scenario():
        comm = communicator([ORIGIN])
        connected, _ = await comm.connect()
        assert not connected

    async_to_sync(scenario)()


def test_a_non_reviewer_socket_is_refused(personas):
    headers = session_headers(personas.olivia)

    async def scenario():
        comm = communicator(headers)
        connected, _ = await comm.connect()
        assert not connected

    async_to_sync(scenario)()


def test_a_socket_from_a_foreign_origin_is_refused(personas):
    headers = [h for h in session_headers(personas.alice) if h[0] != b"origin"]
    headers.append((b"origin", b"http://evil.example"))

    async def scenario():
        comm = communicator(headers)
        connected, _ = await comm.connect()
        assert not connected

    async_to_sync(scenario)()


def test_a_reviewer_gets_a_snapshot_then_the_new_approval_live(personas, interrupted_run):
    headers = session_headers(personas.alice)

    async def scenario():
        comm = communicator(headers)
        connected, _ = await comm.connect()
        assert connected
        snapshot = await comm.receive_json_from(timeout=5)
        assert snapshot["type"] == "snapshot"
        assert snapshot["data"]["approvals"] == []

        _, approval = await in_thread(interrupted_run)()

        created = await receive_until(comm, "approval.created")
        assert created["seq"] > snapshot["seq"]
        assert created["data"]["id"] == str(approval.id)
        assert created["data"]["tool"] == "send_email"
        assert created["data"]["arguments"] == approval.arguments
        assert created["data"]["reviewer"] == {"users": [], "group": "reviewers"}
        assert created["data"]["expires_at"]
        await comm.disconnect()

    async_to_sync(scenario)()


def test_after_a_disconnect_replay_returns_what_was_missed(personas, interrupted_run):
    headers = session_headers(personas.alice)

    async def scenario():
        comm = communicator(headers)
        assert (await comm.connect())[0]
        last_seen = (await comm.receive_json_from(timeout=5))["seq"]
        await comm.disconnect()

        _, missed = await in_thread(interrupted_run)()

        comm = communicator(headers)
        assert (await comm.connect())[0]
        snapshot = await receive_until(comm, "snapshot")
        assert [a["id"] for a in snapshot["data"]["approvals"]] == [str(missed.id)]
        await comm.send_json_to({"type": "replay", "after": last_seen})
        replayed = []
        while True:
            message = await comm.receive_json_from(timeout=5)
            if message["type"] == "replay.done":
                break
            if message["type"] != "heartbeat":
                replayed.append(message)
        assert [m["seq"] for m in replayed] == sorted(m["seq"] for m in replayed)
        assert all(m["seq"] > last_seen for m in replayed)
        created = [m for m in replayed if m["type"] == "approval.created"]
        assert [m["data"]["id"] for m in created] == [str(missed.id)]
        assert message["seq"] >= created[0]["seq"]
        await comm.disconnect()

    async_to_sync(scenario)()


def test_an_assigned_approval_reaches_its_reviewer_and_admins_only(personas, interrupted_run):
    alice, bob, admin = (session_headers(u) for u in (personas.alice, personas.bob, personas.admin))

    async def scenario():
        socks = {}
        for name, headers in (("alice", alice), ("bob", bob), ("admin", admin)):
            socks[name] = communicator(headers)
            assert (await socks[name].connect())[0]
            await receive_until(socks[name], "snapshot")

        _, approval = await in_thread(interrupted_run)(reviewers=["bob"])

        for name in ("bob", "admin"):
            message = await receive_until(socks[name], "approval.created")
            assert message["data"]["id"] == str(approval.id)
        # alice is a reviewer, but not this one's: she must never see it, pushed or replayed.
        # (Pushes go out in one loop, so bob's copy arriving means alice's would have too.)
        alice_sock = socks["alice"]
        while not await alice_sock.receive_nothing(timeout=0.5):
            assert (await alice_sock.receive_json_from())["type"] != "approval.created"
        await alice_sock.send_json_to({"type": "replay", "after": 0})
        message = await alice_sock.receive_json_from(timeout=5)
        while message["type"] != "replay.done":
            assert message["type"] != "approval.created"
            message = await alice_sock.receive_json_from(timeout=5)
        for comm in socks.values():
            await comm.disconnect()

    async_to_sync(scenario)()


def test_the_heartbeat_carries_the_latest_sequence(personas, interrupted_run):
    headers = session_headers(personas.alice)
    interrupted_run()

    async def scenario():
        comm = communicator(headers)
        assert (await comm.connect())[0]
        snapshot = await receive_until(comm, "snapshot")
        beat = await receive_until(comm, "heartbeat", timeout=6)
        assert beat["seq"] == snapshot["seq"] > 0
        await comm.disconnect()

    async_to_sync(scenario)()
