"""How a decision reaches the agent's side: a webhook (the desk's HMAC checked here first), the
desk's Server-Sent Events stream (resumed with `Last-Event-ID`), or a list of what was decided
and not consumed yet (polling, and the resumer's start).

The webhook's HMAC only authenticates the delivery, as a cheap filter before any other work; what
authorises a tool is the decision's Ed25519 signature (`DeskClient.verify`): a leaked webhook
secret cannot forge an approval.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import httpx

from reviewdesk_client.errors import DeskError, WebhookError
from reviewdesk_client.models import Outcome, Ticket

if TYPE_CHECKING:
    from reviewdesk_client.client import DeskClient

SIGNATURE_HEADER = "Desk-Signature"
DECIDED = ("approved", "rejected")
# The desk's heartbeat is 15 s by default: a stream silent for longer than this is dead.
STREAM_READ_TIMEOUT = 45.0


# --- Webhooks --------------------------------------------------------------------------------
def parse_webhook(
    headers: Mapping[str, str], body: bytes, secret: str, tolerance: int = 300, *, now: float | None = None
) -> list[dict[str, Any]]:
    """The events of one webhook delivery, once its `Desk-Signature: t=…,v1=…` is the HMAC-SHA256
    of f"{t}." + body under `secret` and t is within `tolerance` seconds of now. Raises WebhookError.
    A delivery holds one event `{id, type, seq, run, created_at, data}`; a list is accepted too."""
    header = _header(headers, SIGNATURE_HEADER)
    if not header:
        raise WebhookError(f"no {SIGNATURE_HEADER} header")
    try:
        parts = dict(item.strip().split("=", 1) for item in header.split(","))
        t = int(parts["t"])
        given = parts["v1"]
    except (ValueError, KeyError):
        raise WebhookError(f"malformed {SIGNATURE_HEADER}") from None
    if abs((time.time() if now is None else now) - t) > tolerance:
        raise WebhookError("the delivery's timestamp is outside the tolerance (a replay?)")
    expected = hmac.new(secret.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, given):
        raise WebhookError("the delivery's HMAC does not match")
    parsed = json.loads(body)
    return parsed if isinstance(parsed, list) else [parsed]


def _header(headers: Mapping[str, str], name: str) -> str | None:
    for key, value in headers.items():
        if key.lower() == name.lower():
            return value
    return None


# --- Server-Sent Events ------------------------------------------------------------------------
class EventStream:
    """The desk's event stream, reconnecting with `Last-Event-ID` after the last event seen.
    Iterate for `{"seq", "type", "data"}`; `last_seq` is the position to resume from (it moves on
    with the desk's keep-alives too). `run_id` follows one run; else every run this token may see.
    `stop` (a threading.Event) ends the iteration at the next event or keep-alive."""

    def __init__(
        self,
        desk: DeskClient,
        after: int | None = None,
        *,
        run_id: str | None = None,
        stop: threading.Event | None = None,
        read_timeout: float = STREAM_READ_TIMEOUT,
        reconnect_delay: float = 0.5,
    ) -> None:
        self.desk = desk
        self.last_seq = after or 0
        self.path = f"/api/v1/runs/{run_id}/stream" if run_id else "/api/v1/stream"
        self.stop = stop or threading.Event()
        self.read_timeout = read_timeout
        self.reconnect_delay = reconnect_delay
        self.connections = 0

    def __iter__(self) -> Iterator[dict[str, Any]]:
        while not self.stop.is_set():
            try:
                yield from self._one_connection()
            except (httpx.TransportError, DeskError) as error:
                if isinstance(error, DeskError) and error.status in (400, 401, 403, 404):
                    raise
            if not self.stop.is_set():
                time.sleep(self.reconnect_delay)

    def _one_connection(self) -> Iterator[dict[str, Any]]:
        headers = {"Last-Event-ID": str(self.last_seq)} if self.last_seq else {}
        with self.desk.http.stream(self.path, headers=headers, read_timeout=self.read_timeout) as response:
            self.connections += 1
            for kind, value in _sse_messages(response.iter_lines()):
                if self.stop.is_set():
                    return
                if kind == "keep-alive":
                    self.last_seq = max(self.last_seq, value)
                    yield {"seq": self.last_seq, "type": "keep-alive", "data": None}
                    continue
                if value.get("type") == "end":
                    return
                self.last_seq = max(self.last_seq, int(value.get("seq") or 0))
                yield value


def _sse_messages(lines: Iterator[str]) -> Iterator[tuple[str, Any]]:
    """("event", {"seq", "type", "data"}) per message, ("keep-alive", seq) per heartbeat."""
    data: list[str] = []
    event_id = event_type = None
    for line in lines:
        if line == "":
            if data:
                message = json.loads("\n".join(data))
                message.setdefault("type", event_type)
                if event_id is not None:
                    message.setdefault("seq", int(event_id))
                yield "event", message
            elif event_type == "end":
                yield "event", {"type": "end"}
            data, event_id, event_type = [], None, None
        elif line.startswith(":"):
            comment = line[1:].strip()
            if comment.startswith("keep-alive"):
                seq = comment.partition("seq=")[2]
                yield "keep-alive", int(seq) if seq.isdigit() else 0
        else:
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "data":
                data.append(value)
            elif name == "id":
                event_id = value
            elif name == "event":
                event_type = value


def sse_events(
    desk: DeskClient,
    after: int | None = None,
    *,
    run_id: str | None = None,
    stop: threading.Event | None = None,
) -> Iterator[dict[str, Any]]:
    """The desk's events after `after` (keep-alives left out), reconnecting as needed."""
    for event in EventStream(desk, after, run_id=run_id, stop=stop):
        if event["type"] != "keep-alive":
            yield event


def wait_sse(desk: DeskClient, ticket: Ticket, timeout: float) -> Outcome | None:
    """Follow the ticket's run from its first event until its approval settles, or `timeout`.
    Reading the run's stream from the start leaves no gap between a check and a subscription."""
    from reviewdesk_client.client import outcome_of

    deadline = time.monotonic() + timeout
    stop = threading.Event()
    timer = threading.Timer(timeout, stop.set)
    timer.daemon = True
    timer.start()
    stream = EventStream(desk, run_id=ticket.run_id, stop=stop, read_timeout=max(0.5, min(timeout, 20.0)))
    try:
        for event in stream:
            if time.monotonic() >= deadline:
                return None
            data = event.get("data") or {}
            if event["type"].startswith("approval.") and data.get("id") == ticket.approval_id:
                outcome = outcome_of(data)
                if outcome is not None:
                    return outcome
    except httpx.ReadTimeout:
        return None
    finally:
        timer.cancel()
    return None


# --- Polling and the resumer's start -----------------------------------------------------------
def decided_unconsumed(desk: DeskClient, *, run: str | None = None) -> list[dict[str, Any]]:
    """The approvals this token submitted that were decided (approved or rejected) and whose
    decision nobody consumed yet: what a decision delivered while the agent was down left behind."""
    approvals = desk.approvals(status=list(DECIDED), consumed=False, run=run)
    return [
        a
        for a in approvals
        if a.get("status") in DECIDED and a.get("decision") and not a["decision"].get("consumed_at")
    ]
