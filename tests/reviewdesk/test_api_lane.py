"""API requests take turns on one sync thread per web process, waiting a bounded time for it
(`ApiLane`, reviewdesk/serve/asgi_handler.py).

In-process: the desk's ASGI application called as a server calls it, on the test database,
and the lane itself on an event loop. What is checked: which thread each request's middleware
ran on; that a request stuck on the lane (a webhook URL whose DNS lookup hangs) holds up
neither another user's API request beyond the wait nor a desk socket's database read; and
the lane's hand-over when waiters time out or go away.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import pytest
from channels.db import database_sync_to_async

from reviewdesk.accounts.services import token_create
from reviewdesk.asgi import application
from reviewdesk.events.services import latest_seq
from reviewdesk.serve.asgi_handler import ApiLane
from tests.reviewdesk.asgi_client import asgi_get, asgi_request

pytestmark = pytest.mark.django_db(transaction=True)  # the ASGI handler runs the view in a thread


def threads_of(paths: list[str], token: str, monkeypatch, root_path: str = "") -> list[threading.Thread]:
    """The thread each request's middleware ran on, for GETs of `paths` one after the other
    (the Thread objects, held: an ended thread's ident can be another's later)."""
    from reviewdesk.desk.middleware import BodyLimitMiddleware

    seen: list[threading.Thread] = []
    real = BodyLimitMiddleware.__call__

    def noted(self, request):
        seen.append(threading.current_thread())
        return real(self, request)

    with monkeypatch.context() as patch:
        patch.setattr(BodyLimitMiddleware, "__call__", noted)
        for path in paths:
            asyncio.run(asgi_get(application, path, token, root_path=root_path))
    return seen


def test_api_requests_take_turns_on_one_lane_thread_and_pages_get_one_each(personas, monkeypatch):
    _, raw = token_create(user=personas.carol, scopes=["submit"])
    api = threads_of(["/api/v1/runs", "/api/v1/runs", "/api/v1/runs"], raw, monkeypatch)
    assert api[0] is api[1] is api[2], api
    assert api[0].name.startswith("api-lane"), api[0].name  # not the thread the sockets share
    pages = threads_of(["/accounts/login/", "/accounts/login/"], raw, monkeypatch)
    assert pages[0] is not pages[1] and api[0] not in pages, pages


def test_behind_a_root_path_api_requests_still_take_the_lane(personas, monkeypatch, settings):
    settings.FORCE_SCRIPT_NAME = None
    _, raw = token_create(user=personas.carol, scopes=["submit"])
    api = threads_of(["/api/v1/runs", "/api/v1/runs"], raw, monkeypatch, root_path="/desk")
    assert api[0] is api[1] and api[0].name.startswith("api-lane"), api


def test_behind_a_forced_script_name_api_requests_still_take_the_lane(personas, monkeypatch, settings):
    """A proxy that keeps the prefix and sends no root_path, with FORCE_SCRIPT_NAME set."""
    settings.FORCE_SCRIPT_NAME = "/desk"
    _, raw = token_create(user=personas.carol, scopes=["submit"])
    api = threads_of(["/desk/api/v1/runs", "/desk/api/v1/runs"], raw, monkeypatch)
    assert api[0] is api[1] and api[0].name.startswith("api-lane"), api


def test_with_the_lane_off_each_api_request_gets_a_thread_of_its_own(personas, monkeypatch, settings):
    settings.DESK_API_LANE_STALL_MS = 0
    _, raw = token_create(user=personas.carol, scopes=["submit"])
    api = threads_of(["/api/v1/runs", "/api/v1/runs"], raw, monkeypatch)
    assert api[0] is not api[1], api


@pytest.fixture
def hanging_dns(monkeypatch):
    """A resolver that hangs for one attacker-chosen name until released (as a DNS server that
    never answers holds glibc for seconds per try); other names resolve as usual."""
    release, asked = threading.Event(), threading.Event()
    real = socket.getaddrinfo

    def resolver(host, *args, **kwargs):
        if host == "hooks.slow.example":
            asked.set()
            release.wait(10)
            return real("93.184.216.34", *args, **kwargs)  # a public address: the hook is accepted
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    yield asked, release
    release.set()


def test_a_request_stuck_on_the_lane_holds_up_neither_other_api_requests_nor_the_sockets(
    personas, hanging_dns
):
    asked, release = hanging_dns
    _, attacker = token_create(user=personas.carol, scopes=["submit"])
    _, reviewer = token_create(user=personas.alice, scopes=["review"])
    hook = json.dumps({"url": "https://hooks.slow.example/h", "events": ["run.succeeded"]}).encode()

    async def scenario():
        await asgi_get(application, "/api/v1/approvals", reviewer)  # warm
        stuck = asyncio.create_task(asgi_request(application, "POST", "/api/v1/webhooks", attacker, hook))
        while not asked.is_set():  # the registration holds the lane, resolving the host
            await asyncio.sleep(0.01)
        read = await asyncio.wait_for(asgi_get(application, "/api/v1/approvals", reviewer), 5)
        seq = await asyncio.wait_for(database_sync_to_async(latest_seq)(), 5)  # a socket's heartbeat read
        still_stuck = not stuck.done()
        release.set()
        return read, seq, still_stuck, await stuck

    read, seq, still_stuck, registered = asyncio.run(scenario())
    assert still_stuck  # both answered while the registration was still resolving
    assert read.status == 200 and isinstance(seq, int)
    assert registered.status == 201


def test_control_a_request_waits_its_turn_on_the_lane_while_the_holder_has_not_stalled(
    personas, settings, monkeypatch
):
    """The other side of the bound: behind a request that is slow but not stalled, the next
    waits its turn on the lane (the same thread) rather than taking a thread of its own."""
    settings.DESK_API_LANE_STALL_MS = 10_000
    _, raw = token_create(user=personas.carol, scopes=["submit"])
    from reviewdesk.desk.middleware import BodyLimitMiddleware

    seen: list[threading.Thread] = []
    real = BodyLimitMiddleware.__call__

    def slow(self, request):
        seen.append(threading.current_thread())
        time.sleep(0.2)
        return real(self, request)

    async def two_at_once():
        return await asyncio.gather(
            asgi_get(application, "/api/v1/runs", raw), asgi_get(application, "/api/v1/runs", raw)
        )

    monkeypatch.setattr(BodyLimitMiddleware, "__call__", slow)
    first, second = asyncio.run(two_at_once())
    assert first.status == second.status == 200
    assert seen[0] is seen[1], seen


# --- the lane itself ------------------------------------------------------------------------


def test_the_lane_goes_to_its_waiters_in_turn_and_a_waiter_behind_a_stalled_holder_gets_none():
    async def scenario():
        lane = ApiLane()
        assert await lane.take(1)
        second = asyncio.create_task(lane.take(1))
        late = asyncio.create_task(lane.take(0.05))
        await asyncio.sleep(0.1)
        assert late.done() and late.result() is False  # the holder kept it past `late`'s stall
        assert not second.done()
        lane.give_back()
        assert await second is True  # the lane went to the waiter still waiting
        assert await lane.take(0) is False  # held: no wait, no lane
        lane.give_back()
        assert await lane.take(0) is True  # free again
        lane.give_back()

    asyncio.run(scenario())


def test_a_waiter_waits_on_while_the_lane_keeps_changing_hands():
    """Three requests of 0.12 s each, one after the other: the third waits 0.24 s, longer than
    its 0.2 s stall, yet gets the lane: no holder kept it that long (a queue, not a stall)."""

    async def request(lane: ApiLane) -> bool:
        if not await lane.take(0.2):
            return False
        await asyncio.sleep(0.12)
        lane.give_back()
        return True

    async def scenario():
        lane = ApiLane()
        first = asyncio.create_task(request(lane))
        await asyncio.sleep(0)  # the first holds it
        return await asyncio.gather(first, request(lane), request(lane))

    assert asyncio.run(scenario()) == [True, True, True]


def test_a_request_arriving_while_the_holder_has_stalled_does_not_wait():
    async def scenario():
        lane = ApiLane()
        assert await lane.take(1)
        await asyncio.sleep(1.1)  # the holder is past a 1 s stall
        started = time.monotonic()
        assert await lane.take(1) is False
        return time.monotonic() - started

    assert asyncio.run(scenario()) < 0.5  # at once, not after another second


async def held_with_a_waiter() -> tuple[ApiLane, asyncio.Task]:
    """A lane held, and a request waiting for it."""
    lane = ApiLane()
    assert await lane.take(1)
    waiting = asyncio.create_task(lane.take(5))
    await asyncio.sleep(0.01)
    return lane, waiting


def test_a_waiter_that_goes_away_does_not_keep_the_lane():
    async def scenario():
        lane, gone = await held_with_a_waiter()
        gone.cancel()  # the client disconnected while waiting
        await asyncio.sleep(0.01)
        lane.give_back()
        return await lane.take(0)

    assert asyncio.run(scenario()) is True


def test_a_waiter_cancelled_as_the_lane_was_handed_to_it_hands_it_on():
    async def scenario():
        lane, gone = await held_with_a_waiter()
        lane.give_back()  # handed to `gone`...
        gone.cancel()  # ...which is cancelled before it runs again
        with pytest.raises(asyncio.CancelledError):
            await gone
        return await lane.take(0)

    assert asyncio.run(scenario()) is True


def test_a_caller_on_another_event_loop_does_not_wait_for_a_lane_held_on_this_one():
    """Its waiter would be handed over from the holder's loop thread: it gets a thread of its
    own at once instead (only tests run several loops)."""
    lane, held, done = ApiLane(), threading.Event(), threading.Event()

    async def hold():
        assert await lane.take(1)
        held.set()
        await asyncio.get_running_loop().run_in_executor(None, done.wait, 10)
        lane.give_back()

    holder = threading.Thread(target=lambda: asyncio.run(hold()))
    holder.start()
    try:
        assert held.wait(10)
        started = time.monotonic()
        assert asyncio.run(lane.take(5)) is False
        assert time.monotonic() - started < 2.5  # not the 5 s it would have waited
    finally:
        done.set()
        holder.join(10)
