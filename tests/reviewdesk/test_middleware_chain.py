"""Under ASGI the middleware chain runs in sync mode, on the request's one thread.

In-process: the desk's ASGI application (reviewdesk/asgi.py) called as a server calls it, on
the test database. Django's own handler runs the desk's async-capable `MiddlewareMixin`s in
async mode, each `process_request` / `process_response` through `sync_to_async` (a thread hop
and back per method), and the view, `process_view` and the render one hop each more;
`SyncChainASGIHandler` runs the whole chain in sync mode, adapted once. Counted here:
`sync_to_async` calls during one API request.
"""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import SyncToAsync
from django.core.asgi import get_asgi_application as django_asgi_application

from reviewdesk.accounts.services import token_create
from reviewdesk.asgi import application
from tests.reviewdesk.asgi_client import asgi_get

pytestmark = pytest.mark.django_db(transaction=True)  # the ASGI handler runs the view in a thread


def hops_of_one_request(app, token: str, monkeypatch) -> tuple[list[str], object]:
    """The `sync_to_async` calls one API GET through `app` makes, and its response."""
    assert asyncio.run(asgi_get(app, "/api/v1/runs", token)).status == 200  # warm: the first connections
    hops: list[str] = []
    real_call = SyncToAsync.__call__

    async def counted(self, *args, **kwargs):
        hops.append(getattr(self.func, "__qualname__", repr(self.func)))
        return await real_call(self, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(SyncToAsync, "__call__", counted)
        response = asyncio.run(asgi_get(app, "/api/v1/runs", token))
    return hops, response


def test_an_api_request_under_asgi_hops_threads_three_times_not_once_per_middleware(personas, monkeypatch):
    _, raw = token_create(user=personas.carol, scopes=["submit"])
    hops, response = hops_of_one_request(application, raw, monkeypatch)
    assert response.status == 200
    # The middleware still ran: the clickjacking header and the CSP are on the response.
    assert response.headers["x-frame-options"] == "DENY"
    assert "content-security-policy" in response.headers
    # The request_started signal, the chain, the response's close.
    assert len(hops) <= 3, hops
    # The same request through Django's own handler, for comparison: a hop per middleware method.
    stock, _ = hops_of_one_request(django_asgi_application(), raw, monkeypatch)
    assert len(stock) > 10, stock
