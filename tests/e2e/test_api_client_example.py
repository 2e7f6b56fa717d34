"""examples/client.py, run as a subprocess against the real stack (daphne + Celery worker):
it submits, follows the SSE stream, and stops when the run waits for approval; a dropped
connection (a proxy that cuts the first stream) is resumed with Last-Event-ID."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
from urllib.parse import urlsplit

import pytest

from reviewdesk.accounts.services import token_create
from reviewdesk.runs.models import Run
from tests.conftest import SEND_EMAIL_SCRIPT
from tests.e2e.conftest import REPO

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def run_client(url: str, token: str) -> subprocess.CompletedProcess:
    model = json.dumps({"provider": "scripted", "script": SEND_EMAIL_SCRIPT})
    return subprocess.run(
        [
            sys.executable,
            "examples/client.py",
            "--url",
            url,
            "--model",
            model,
            "Tell Ada her refund is on its way.",
        ],
        cwd=REPO,
        env={"DESK_TOKEN": token, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_example_client_follows_its_run_until_it_needs_approval(live_stack, personas):
    _, token = token_create(user=personas.carol, scopes=["submit"])
    done = run_client(live_stack.url, token)
    assert done.returncode == 0, done.stdout + done.stderr
    run = Run.objects.get(submitted_by=personas.carol)
    assert run.status == "input_required"
    assert f"submitted run {run.id}" in done.stdout
    assert "run is input_required" in done.stdout
    assert "needs approval: send_email" in done.stdout


class CuttingProxy:
    """A TCP proxy to the stack that cuts the first SSE connection after its first event."""

    def __init__(self, target: str):
        parts = urlsplit(target)
        self.target = (parts.hostname, parts.port)
        self.server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}"
        self.cut = 0
        self.requests: list[bytes] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket):
        """Pipe both ways; requests are read as they come (the client reuses its connection)."""
        upstream = socket.create_connection(self.target)
        state = {"cutting": False}
        threading.Thread(target=self._requests, args=(client, upstream, state), daemon=True).start()
        since_stream = b""
        while True:
            try:
                chunk = upstream.recv(65536)
            except OSError:
                break
            if not chunk:
                break
            if not state["cutting"]:
                client.sendall(chunk)
                continue
            since_stream += chunk
            first = since_stream.find(b"\nid: ")
            end = since_stream.find(b"\n\n", first) if first >= 0 else -1
            if end >= 0:  # send up to the end of the first event, then drop the connection
                client.sendall(since_stream[: end + 2])
                break
        for sock in (client, upstream):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _requests(self, client: socket.socket, upstream: socket.socket, state: dict):
        with contextlib.suppress(OSError):
            while chunk := client.recv(65536):
                if chunk[:4] in (b"GET ", b"POST"):
                    self.requests.append(chunk)
                    if b"/stream" in chunk.split(b"\r\n", 1)[0] and self.cut == 0:
                        self.cut, state["cutting"] = 1, True
                upstream.sendall(chunk)

    def close(self):
        self.server.close()


def test_the_example_client_resumes_a_dropped_stream_with_last_event_id(live_stack, personas):
    proxy = CuttingProxy(live_stack.url)
    try:
        _, token = token_create(user=personas.carol, scopes=["submit"])
        done = run_client(proxy.url, token)
    finally:
        proxy.close()
    assert done.returncode == 0, done.stdout + done.stderr
    assert proxy.cut == 1 and "; resuming after event " in done.stderr
    streams = [r for r in proxy.requests if b"/stream" in r.split(b"\r\n", 1)[0]]
    assert len(streams) >= 2 and b"last-event-id:" in streams[1].lower()
    assert "needs approval: send_email" in done.stdout
    # Each event printed once: the resumed stream starts after the last one seen.
    lines = [line for line in done.stdout.splitlines() if line.startswith("[")]
    assert len(lines) == len(set(lines))
