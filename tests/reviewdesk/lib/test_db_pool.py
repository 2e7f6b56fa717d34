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
from tests.reviewdesk.asgi_client import asgi_get

pytestmark = [
    pytest.mark.django_db(transaction=True),  # the ASGI handler runs each view in a thread of its own
    pytest.mark.skipif(connection.vendor != "postgresql", reason="SQLite is a file, opened in-process"),
]


def test_asgi_requests_reuse_pooled_connections(personas, monkeypatch):
    _, raw = token_create(user=personas.carol, scopes=["submit"])
    app = get_asgi_application()
    assert asyncio.run(asgi_get(app, "/api/v1/runs", raw)).status == 200  # the process's first connections
    # Counted where Django (psycopg.connect) and the pool (Connection.connect) open them.
    connects: list[str] = []
    real_connect = psycopg.Connection.connect.__func__

    def counted(cls, *args, **kwargs):
        connects.append("connect")
        return real_connect(cls, *args, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "connect", classmethod(counted))
    monkeypatch.setattr(psycopg, "connect", psycopg.Connection.connect)
    statuses = [asyncio.run(asgi_get(app, "/api/v1/runs", raw)).status for _ in range(10)]
    assert statuses == [200] * 10
    assert len(connects) <= 1, f"{len(connects)} PostgreSQL connects for 10 requests"
