"""A real HTTP receiver (http.server in a thread) and a real Celery worker (a thread of this
process consuming the real Redis queue) for the webhook tests."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from celery.contrib.testing.worker import start_worker
from django.db import connections

from reviewdesk.celery import app as celery_app
from reviewdesk.webhooks.services import signature_valid


@dataclass
class Received:
    at: float
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    url: str
    status: int = 200  # what it answers; a test switches it
    delay: float = 0.0  # seconds it takes to answer
    requests: list[Received] = field(default_factory=list)

    def verified(self, request: Received, secret: str) -> bool:
        """What a client's receiver does, with the desk's own receiver helper (test_signing.py
        shows it refusing a bad signature and an old timestamp)."""
        return signature_valid(secret=secret, body=request.body, header=request.headers["Desk-Signature"])

    def wait_for(self, count: int, timeout: float = 30) -> list[Received]:
        deadline = time.monotonic() + timeout
        while len(self.requests) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(self.requests) >= count, f"{len(self.requests)} of {count} requests arrived"
        return self.requests


def wait_for(predicate, timeout=30.0):
    """`predicate()`'s first truthy answer, asked every 50 ms; fails after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := predicate():
            return result
        time.sleep(0.05)
    raise AssertionError("timed out")


@pytest.fixture
def receiver():
    state = Receiver(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            state.requests.append(Received(time.monotonic(), dict(self.headers), body))
            time.sleep(state.delay)
            self.send_response(state.status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()


@pytest.fixture
def celery_worker(task_queue, settings):
    """A Celery worker in a thread, consuming the real Redis queue (runs and deliveries alike).
    Fast retries: 0.2 s, then doubling."""
    settings.DESK_WEBHOOKS_ALLOW_PRIVATE = True
    settings.DESK_WEBHOOK_BACKOFF_SECONDS = 0.2
    # The solo pool sends worker_process_init in this thread, and Celery's Django fixup then
    # closes the socket of every connection this thread holds, as a forked child must. Handed
    # back first: a pooled connection closed under psycopg would go back to the pool dead.
    connections.close_all()
    # Celery's test worker sets the root logger to ERROR for the rest of the process: the tests
    # after this one (caplog among them) would see no warning logged anywhere.
    root = logging.getLogger()
    level = root.level
    try:
        with start_worker(celery_app, pool="solo", perform_ping_check=False, shutdown_timeout=20) as worker:
            yield worker
    finally:
        root.setLevel(level)
