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
"""

from __future__ import annotations

import django
from django.core.handlers.asgi import ASGIHandler


class SyncChainASGIHandler(ASGIHandler):
    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)
        # The handler awaits the chain (`get_response_async`): one sync_to_async around all of it.
        self._middleware_chain = self.adapt_method_mode(True, self._middleware_chain, False)


def get_asgi_application() -> SyncChainASGIHandler:
    """`django.core.asgi.get_asgi_application`, with the sync chain."""
    django.setup(set_prefix=False)
    return SyncChainASGIHandler()
