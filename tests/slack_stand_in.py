"""A local stand-in for the Slack Web API (the SDK is pointed at it by SLACK_API_URL), and
interaction requests signed as Slack signs them.

The server answers what the desk calls (chat.postMessage, chat.update, chat.postEphemeral,
views.open) as Slack does, records every call, and can be down (nothing listening), failing
(503) or rate limiting (429 with Retry-After). It judges nothing: the tests do."""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SIGNING_SECRET = "test-signing-secret-of-the-stand-in"
_triggers = itertools.count(1)
BOT_TOKEN = "xoxb-test-token"
TEAM = "T0TEST"


@dataclass
class Call:
    method: str
    params: dict[str, Any]
    token: str


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        server: SlackStandIn = self.server.owner  # type: ignore[attr-defined]
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if self.headers.get("Content-Type", "").startswith("application/json"):
            params = json.loads(raw or b"{}")
        else:
            params = {k: v[0] for k, v in urllib.parse.parse_qs(raw.decode()).items()}
        method = self.path.rsplit("/", 1)[-1]
        token = self.headers.get("Authorization", "").removeprefix("Bearer ")
        status, body, headers = server.answer(method, params, token)
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


class SlackStandIn:
    """Start with `up()`; `url` is SLACK_API_URL. `mode`: "ok", "error" (503), "ratelimited"."""

    def __init__(self) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/api/"
        self.calls: list[Call] = []
        self.mode = "ok"
        self.lock = threading.Lock()
        self._ts = itertools.count(1)
        self._server: ThreadingHTTPServer | None = None

    def answer(self, method: str, params: dict[str, Any], token: str) -> tuple[int, dict, dict]:
        with self.lock:
            self.calls.append(Call(method, params, token))
            mode = self.mode
        if token != BOT_TOKEN:
            return 200, {"ok": False, "error": "invalid_auth"}, {}
        if mode == "error":
            return 503, {"ok": False, "error": "service_unavailable"}, {}
        if mode == "ratelimited":
            return 429, {"ok": False, "error": "ratelimited"}, {"Retry-After": "1"}
        if method == "chat.postMessage":
            channel = params.get("channel", "")
            channel = "D" + channel[1:] if channel.startswith("U") else channel  # a DM's channel
            return 200, {"ok": True, "channel": channel, "ts": f"{time.time():.0f}.{next(self._ts):06d}"}, {}
        if method in ("chat.update", "chat.postEphemeral", "views.open"):
            return 200, {"ok": True, "channel": params.get("channel"), "ts": params.get("ts")}, {}
        return 200, {"ok": False, "error": "unknown_method"}, {}

    def of(self, method: str) -> list[Call]:
        with self.lock:
            return [c for c in self.calls if c.method == method]

    def up(self) -> None:
        ThreadingHTTPServer.allow_reuse_address = True
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), _Handler)
        self._server.daemon_threads = True
        self._server.owner = self  # type: ignore[attr-defined]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def down(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def signed_headers(body: bytes, *, at: int | None = None, secret: str = SIGNING_SECRET) -> dict[str, str]:
    """The headers Slack sends: `v0=` HMAC-SHA256 of `v0:{timestamp}:{body}`."""
    timestamp = str(int(time.time()) if at is None else at)
    digest = hmac.new(secret.encode(), f"v0:{timestamp}:".encode() + body, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": timestamp, "X-Slack-Signature": f"v0={digest}"}


def interaction_body(payload: dict[str, Any]) -> bytes:
    return urllib.parse.urlencode({"payload": json.dumps(payload)}).encode()


def click(
    action_id: str, value: str, *, user: str, channel: str = "D0CHAN", team: str = TEAM
) -> dict[str, Any]:
    """A block_actions payload as Slack sends it for a button."""
    return {
        "type": "block_actions",
        "team": {"id": team},
        "user": {"id": user, "team_id": team},
        "channel": {"id": channel},
        "container": {"type": "message", "channel_id": channel},
        # Slack's own: new for every click (so two clicks are two requests, never a replay).
        "trigger_id": f"{time.time():.6f}.{next(_triggers)}",
        "actions": [{"action_id": action_id, "value": value, "type": "button"}],
    }


def reject_submission(value: str, reason: str, *, user: str, team: str = TEAM) -> dict[str, Any]:
    """The reject dialog's view_submission, as Slack sends it."""
    return {
        "type": "view_submission",
        "team": {"id": team},
        "user": {"id": user, "team_id": team},
        "view": {
            "callback_id": "desk_reject_reason",
            "private_metadata": value,
            "state": {"values": {"reason": {"reason_input": {"type": "plain_text_input", "value": reason}}}},
        },
    }


def command_body(text: str, *, user: str, team: str = TEAM) -> bytes:
    """A slash command's form, as Slack posts it (with a trigger id of its own, as each has)."""
    trigger = f"{time.time():.6f}.{next(_triggers)}"
    return urllib.parse.urlencode(
        {"command": "/desk", "text": text, "user_id": user, "team_id": team, "trigger_id": trigger}
    ).encode()
