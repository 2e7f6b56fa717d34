"""PostgreSQL connections under ASGI come from a pool (settings: DESK_DB_POOL_SIZE).

In-process, on the real test database: Django's own ASGI application called as a server calls
it (a fresh event loop, no sync thread around it), and psycopg's real connects counted (each
still made). Without the pool every request ran on a fresh thread whose kept connection was never
reused, so each one paid a PostgreSQL connect.
"""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from django.core.asgi import get_asgi_application
from django.db import connection

from reviewdesk.accounts.services import token_create

pytestmark = [
    pytest.mark.django_db(transaction=True),  # the ASGI handler runs each view in a thread of its own
    pytest.mark.skipif(connection.vendor != "postgresql", reason="SQLite is a file, opened in-process"),
]


async def asgi_get(app, path: str, token: str) -> int:
    """One GET through the ASGI application; its status."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [(b"host", b"testserver"), (b"authorization", f"Bearer {token}".encode())],
        "server": ("testserver", 80),
        "client": ("127.0.0.1", 40000),
    }
    body = [{"type": "http.request", "body": b"", "more_body": False}]
    sent: list[dict] = []

    async def receive() -> dict:
        return body.pop() if body else await asyncio.Future()  # then no disconnect

    async def send(message: dict) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent[0]["status"]


def test_asgi_requests_reuse_pooled_connections(personas, monkeypatch):
    _, raw = token_create(user=personas.carol, scopes=["submit"])
    app = get_asgi_application()
    assert asyncio.run(asgi_get(app, "/api/v1/runs", raw)) == 200  # the process's first connections
    # Counted where Django (psycopg.connect) and the pool (Connection.connect) open them.
    connects: list[str] = []
    real_connect = psycopg.Connection.connect.__func__

    def counted(cls, *args, **kwargs):
        connects.append("connect")
        return real_connect(cls, *args, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "connect", classmethod(counted))
    monkeypatch.setattr(psycopg, "connect", psycopg.Connection.connect)
    statuses = [asyncio.run(asgi_get(app, "/api/v1/runs", raw)) for _ in range(10)]
    assert statuses == [200] * 10
    assert len(connects) <= 1, f"{len(connects)} PostgreSQL connects for 10 requests"
