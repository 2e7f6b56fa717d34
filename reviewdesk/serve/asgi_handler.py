"""Django's ASGI handler with its middleware chain and views run in sync mode.

Django's own `ASGIHandler` loads the middleware chain in async mode. The stock middlewares the
desk uses are async-capable `MiddlewareMixin`s, whose async mode calls each `process_request` and
`process_response` through `sync_to_async`: a hop to the request's sync thread and back per
method; and the view, its `process_view` hooks and the template response's render each take
one more. An API request paid 16 hops, 25-30% of the web process's CPU for the bench's bare
request (figure 6s). The desk's views are all sync, so this handler loads the chain in sync
mode, as Django's WSGI handler does, and adapts it once at the top: each request hops into its
sync thread once and runs middleware, view and render there as plain calls. What runs on that
thread is unchanged: Django already ran every sync middleware method and view on the request's
one thread-sensitive thread.

And API requests take turns on one sync thread per process (`ApiLane`), where Django gives
every request a thread of its own (`ThreadSensitiveContext`). API requests are short, and most
write audit rows and desk events under the writers' lock (reviewdesk/lib/db.py). Several at once in
one process only interleave under the GIL: each stretched the others' lock holds, and the
switching cost CPU besides (bench #6, one web process: the web's lock holds 38 -> 11 ms a
cycle, its CPU 55 -> 38 ms a cycle, 11 -> 15 cycles/s in one run). But a request may also wait
with the GIL released (a webhook URL's DNS lookup, the writers' lock held by a worker, a pooled
connection): a request that holds the lane for DESK_API_LANE_STALL_MS counts as stalled, and
those waiting behind it, or arriving meanwhile, run on threads of their own, as Django would
run them, so nobody's slow request holds up the rest for longer than that. The lane is not
the thread Channels' consumers share: a slow API request never holds up the desk's sockets. Pages keep a thread each (a login's password hash, a page
of 10,000 rows or an audit export); DESK_API_LANE_STALL_MS=0 gives every API request one too.
A first version let each request wait 50 ms for the lane, however it moved: under the bench's
load the queue was longer than that, requests spilled onto threads of their own, and the web's
lock waits went from 4 to 62 ms a cycle.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import django
from asgiref.sync import ThreadSensitiveContext
from django.conf import settings
from django.core.handlers.asgi import ASGIHandler, get_script_prefix

API_PREFIX = "/api/"


class ApiLane:
    """One sync thread that API requests take in turn, FIFO, while it makes progress.

    `take(stall)` is True once the caller holds the lane (then `give_back()`), False when the
    request holding it has held it `stall` seconds without giving it back: the caller then
    runs on a thread of its own. A waiter waits as long as the lane keeps changing hands (a
    queue of short requests), and no longer than `stall` behind any one holder; a request that
    arrives while the holder is past `stall` gives up at once. Waiters are futures of the
    event loop that holds the lane; a caller on another loop (only tests run several) does not
    wait for it."""

    def __init__(self) -> None:
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="api-lane")
        self._lock = threading.Lock()  # the state, for callers on several loops' threads
        self._held_on: asyncio.AbstractEventLoop | None = None
        self._taken_at = 0.0  # when the current holder took it (monotonic)
        self._turns = 0  # how many times it has changed hands
        self._waiters: deque[asyncio.Future[bool]] = deque()

    def _hand_to(self, loop: asyncio.AbstractEventLoop) -> None:
        self._held_on, self._taken_at, self._turns = loop, time.monotonic(), self._turns + 1

    def _held_for(self) -> float:
        return time.monotonic() - self._taken_at

    async def take(self, stall: float) -> bool:
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._held_on is None:
                self._hand_to(loop)
                return True
            if self._held_on is not loop or stall <= 0:
                return False
            waiter: asyncio.Future[bool] = loop.create_future()
            self._waiters.append(waiter)
            turn = self._turns

        def check() -> None:
            nonlocal timer, turn
            if waiter.done():
                return
            with self._lock:
                if self._turns != turn:  # it changed hands meanwhile: wait on behind the new holder
                    turn = self._turns
                    timer = loop.call_later(max(stall - self._held_for(), 0.001), check)
                    return
            waiter.set_result(False)  # its holder has held it `stall` without giving it back

        timer = loop.call_later(max(stall - self._held_for(), 0.001), check)
        try:
            return await waiter
        except asyncio.CancelledError:
            # Cancelled (the client went away) just as the lane was handed over: hand it on.
            if waiter.done() and not waiter.cancelled() and waiter.result():
                self.give_back()
            raise
        finally:
            timer.cancel()

    def give_back(self) -> None:
        """Hand the lane to the longest waiter still waiting, or free it."""
        with self._lock:
            while self._waiters:
                waiter = self._waiters.popleft()
                if not waiter.done():  # else it gave up or was cancelled
                    self._hand_to(waiter.get_loop())
                    waiter.set_result(True)
                    return
            self._held_on = None


_api_lane = ApiLane()


def _app_path(scope: dict[str, Any]) -> str:
    """The path within the desk, as Django routes it: `path` less the script prefix
    (FORCE_SCRIPT_NAME, else the `root_path` a server mounting the desk under a prefix sends)."""
    return scope["path"].removeprefix(get_script_prefix(scope))


class SyncChainASGIHandler(ASGIHandler):
    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        stall = settings.DESK_API_LANE_STALL_MS / 1000
        api = scope["type"] == "http" and stall > 0 and _app_path(scope).startswith(API_PREFIX)
        if api and await _api_lane.take(stall):
            try:
                # Thread-sensitive calls of this request go to the lane's thread.
                async with ThreadSensitiveContext(executor=_api_lane.executor):
                    await self.handle(scope, receive, send)
            finally:
                _api_lane.give_back()
            return
        await super().__call__(scope, receive, send)  # a thread of its own

    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)
        # The handler awaits the chain (`get_response_async`): one sync_to_async around all of it.
        self._middleware_chain = self.adapt_method_mode(True, self._middleware_chain, False)


def get_asgi_application() -> SyncChainASGIHandler:
    """`django.core.asgi.get_asgi_application`, with the sync chain."""
    django.setup(set_prefix=False)
    return SyncChainASGIHandler()
