"""Django's ASGI handler with its middleware chain and views run in sync mode (issue 11).

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

And API requests share one sync thread per process, the one Channels' consumers already use,
where Django gives every request a thread of its own (`ThreadSensitiveContext`). API requests
are short, and most write audit rows and desk events under the writers' lock (reviewdesk/db.py).
Several at once in one process only interleave under the GIL: each stretched the others' lock
holds, and the switching cost CPU besides (bench #6, one web process: the web's lock holds 38 ->
11 ms a cycle, its CPU 55 -> 38 ms a cycle, 11 -> 15 cycles/s in one run). Pages keep a thread
each (DESK_API_SHARED_THREAD=0 gives the API one too): a login's password hash, a page of
10,000 rows or an audit export must not hold the API up. More web processes serve more at once.
"""

from __future__ import annotations

from typing import Any

import django
from django.conf import settings
from django.core.handlers.asgi import ASGIHandler

API_PREFIX = "/api/"


class SyncChainASGIHandler(ASGIHandler):
    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if (
            scope["type"] == "http"
            and settings.DESK_API_SHARED_THREAD
            and scope["path"].startswith(API_PREFIX)
        ):
            # No ThreadSensitiveContext: thread-sensitive calls go to the process's one sync thread.
            await self.handle(scope, receive, send)
        else:
            await super().__call__(scope, receive, send)

    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)
        # The handler awaits the chain (`get_response_async`): one sync_to_async around all of it.
        self._middleware_chain = self.adapt_method_mode(True, self._middleware_chain, False)


def get_asgi_application() -> SyncChainASGIHandler:
    """`django.core.asgi.get_asgi_application`, with the sync chain."""
    django.setup(set_prefix=False)
    return SyncChainASGIHandler()
