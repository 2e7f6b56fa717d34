"""#10 a framework's calls on the desk (issue 37): submit → card, decision → the tool starting in
the framework's own process, beside the desk's own push and resume measured in the same run.

The "framework" here is `reviewdesk_client` itself (clients/python), as every adapter uses it:
the same process that submits waits, verifies the decision's signature and binding locally,
consumes it at the desk, and only then starts its tool. No agent SDK is imported: the figure is
what the desk and the client add, not a framework's own step time.

- 10a submit → card: `DeskClient.submit` (POST /api/v1/external/approvals) → `approval.created`
  on alice's socket. Beside it the desk's own: carol's run submitted → `approval.created`
  (its worker runs the scripted model up to the gate first).
- 10b decision → tool start, SSE: alice's decision POST sent → the framework, following the run's
  stream, reads `approval.updated`, verifies, consumes, starts the tool.
- 10c the same through the webhook: the desk's worker POSTs `approval.decided` to a receiver on
  127.0.0.1, which checks the HMAC, then verifies, consumes, starts the tool.
  Beside both: the desk's own resume, decision POST sent → the tool starting in its worker.

The table shows medians and p99 like the other figures; the breakdown prints p50 and p95, as the
issue asks. Keys are fetched from /api/v1/keys (trust on first use: the bench is its own desk).
"""

from __future__ import annotations

import asyncio
import json
import math
import statistics
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from bench import cycle
from bench.common import Row, Socket, ms, size, wait_records

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "clients" / "python"))

from reviewdesk_client import DeskClient, Ticket, Verified
from reviewdesk_client.delivery import parse_webhook, sse_events

EMAIL = cycle.EMAIL


def p95(samples: list[float]) -> float | None:
    if not samples:
        return None
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def spread(samples: list[float]) -> dict[str, Any]:
    return {
        "p50": statistics.median(samples) if samples else None,
        "p95": p95(samples),
        "n": len(samples),
    }


class Framework:
    """The framework's side: its tickets, and the moment each one's tool started."""

    def __init__(self, desk: DeskClient) -> None:
        self.desk = desk
        self.tickets: dict[str, Ticket] = {}
        self.started: dict[str, float] = {}
        self.received: dict[str, float] = {}
        self.refused: list[str] = []
        self.lock = threading.Lock()

    def act(self, approval: dict[str, Any]) -> None:
        """Verify the settled approval's decision, consume it, start the tool (record the time)."""
        ticket = self.tickets.get(approval.get("id", ""))
        decision = approval.get("decision")
        if ticket is None or not decision:
            return
        self.received.setdefault(ticket.approval_id, time.time())
        with self.lock:
            if ticket.approval_id in self.started:
                return  # a redelivery: consumed once already
            try:
                verified: Verified = self.desk.verify(decision, ticket, current_arguments=EMAIL)
                self.desk.guard(verified, EMAIL)
            except Exception as exc:  # the figure counts refusals; none is expected
                self.refused.append(f"{ticket.approval_id}: {exc}")
                return
            self.started[ticket.approval_id] = time.time()


def submit(desk: DeskClient, n: int) -> Ticket:
    call = desk.call("call_1", "send_email", EMAIL, verdicts=("approve", "reject"), reason="bench")
    return desk.submit(
        external_id=f"bench:{time.time_ns()}:{n}",
        framework="bench",
        agent="bench-agent",
        checkpoint=f"cp-{n}",
        calls=[call],
        title="Tell Ada",
        input="Tell Ada.",
    )[0]


def follow(framework: Framework, ticket: Ticket, ready: threading.Event, stop: threading.Event) -> None:
    """The SSE variant's framework: the run's stream from its start (so nothing is missed
    between connecting and deciding); `ready` once the first event arrived."""
    for event in sse_events(framework.desk, run_id=ticket.run_id, stop=stop):
        ready.set()
        data = event.get("data") or {}
        if (
            event["type"] == "approval.updated"
            and data.get("id") == ticket.approval_id
            and data.get("decision")
        ):
            framework.act(data)
            return


def receiver(framework: Framework, secret_box: dict[str, str]) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                events = parse_webhook(dict(self.headers), body, secret_box["secret"])
            except Exception:
                self.send_response(400)
                self.end_headers()
                return
            self.send_response(200)
            self.end_headers()
            for event in events:
                if event.get("type") == "approval.decided":
                    framework.act(event.get("data") or {})

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


async def decide(http: httpx.AsyncClient, people, approval: dict[str, Any]) -> float:
    sent = time.time()
    response = await http.post(
        f"/api/v1/approvals/{approval['id']}/decision",
        json={"verdict": "approve", "reason": "ok", "checkpoint_id": approval["checkpoint_id"]},
        headers={"Authorization": f"Bearer {people.alice_token}"},
    )
    assert response.status_code == 201, response.text
    return sent


async def wait_started(framework: Framework, approval_id: str, timeout: float) -> float | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if approval_id in framework.started:
            return framework.started[approval_id]
        await asyncio.sleep(0.002)
    return None


async def measure(stack, people, redis, budget: float) -> list[Row]:
    cycles = size(4, 30)
    deadline = time.monotonic() + budget
    desk = DeskClient(stack.desk_url, token=people.carol_token)
    desk.keys = desk.fetch_keys()
    framework = Framework(desk)
    secret_box: dict[str, str] = {}
    server = receiver(framework, secret_box)
    hook = desk.http.post(
        "/api/v1/webhooks",
        {"url": f"http://127.0.0.1:{server.server_address[1]}/hook", "events": ["approval.decided"]},
    )
    secret_box["secret"] = hook["secret"]

    sock = await Socket().open(stack.desk_url.replace("http", "ws") + "/ws/desk/", cookie=people.alice_cookie)
    await sock.wait_for(lambda m: m.get("type") == "snapshot", 30)
    card: list[float] = []
    via: dict[str, list[float]] = {"sse": [], "webhook": []}
    # Each in two: the decision reaching the framework, then its verify and consume.
    arrive: dict[str, list[float]] = {"sse": [], "webhook": []}
    check: list[float] = []
    own_card: list[float] = []
    own_resume: list[float] = []
    async with httpx.AsyncClient(base_url=stack.desk_url, timeout=30) as http:
        await cycle.one_cycle(http, sock, people, 30)  # warm the desk's own path too
        for n in range(cycles * 2):
            if time.monotonic() > deadline:
                break
            # The desk's own cycle, interleaved, so both sides meet the same machine.
            if n % 2 == 0:
                own = await cycle.one_cycle(http, sock, people, 30)
                own_card.append(ms(own["t"]["created"] - own["t"]["submit"]))
                # The worker's probe flushes its record a moment after the tool starts.
                tool = wait_records(redis, "bench:tools", lambda x, run=own["run"]: run in x["key"])
                if tool:
                    own_resume.append(ms(tool["at"] - own["t"]["decide"]))
            mode = "sse" if n % 2 == 0 else "webhook"
            submitted = time.time()
            ticket = await asyncio.to_thread(submit, desk, n)
            framework.tickets[ticket.approval_id] = ticket
            at, created = await sock.wait_for(
                lambda m, a=ticket.approval_id: m.get("type") == "approval.created" and m["data"]["id"] == a,
                30,
            )
            card.append(ms(at - submitted))
            stop, ready = threading.Event(), threading.Event()
            if mode == "sse":
                threading.Thread(target=follow, args=(framework, ticket, ready, stop), daemon=True).start()
                await asyncio.to_thread(ready.wait, 30)
            sent = await decide(http, people, created["data"])
            started = await wait_started(framework, ticket.approval_id, 30)
            stop.set()
            if started is not None:
                via[mode].append(ms(started - sent))
                received = framework.received[ticket.approval_id]
                arrive[mode].append(ms(received - sent))
                check.append(ms(started - received))
    await sock.close()
    server.shutdown()
    desk.close()
    # The receiver is gone: an endpoint left live would turn every later figure's events (and
    # #9's seeded history) into deliveries for the worker to fail at, slowing its runs.
    from reviewdesk.webhooks.models import WebhookEndpoint

    WebhookEndpoint.objects.filter(pk=hook["id"]).delete()
    extra = {
        "reach": {
            "submit_to_card": spread(card),
            "own_submit_to_card": spread(own_card),
            "sse": spread(via["sse"]),
            "webhook": spread(via["webhook"]),
            "own_resume": spread(own_resume),
            "sse_arrival": spread(arrive["sse"]),
            "webhook_arrival": spread(arrive["webhook"]),
            "verify_and_consume": spread(check),
            "refused": framework.refused,
        }
    }
    return [
        Row(
            "10a",
            "external: submit → card on alice's socket",
            "ms",
            card,
            floor="the desk's own run: submit → card",
            floor_samples=own_card,
            target="reported",
            extra=extra,
        ),
        Row(
            "10b",
            "external: decision POST → framework's tool starts (SSE)",
            "ms",
            via["sse"],
            floor="the desk's own resume: decision POST → tool starts",
            floor_samples=own_resume,
            target="reported",
            condition=not framework.refused,
        ),
        Row(
            "10c",
            "external: decision POST → framework's tool starts (webhook)",
            "ms",
            via["webhook"],
            floor="the desk's own resume: decision POST → tool starts",
            floor_samples=own_resume,
            target="reported",
            condition=not framework.refused,
        ),
    ]


def reach_text(r: dict[str, Any]) -> str:
    def line(name: str, s: dict[str, Any]) -> str:
        if s["p50"] is None:
            return f"  {name:<52} —"
        return f"  {name:<52} p50 {s['p50']:8.1f} ms, p95 {s['p95']:8.1f} ms (n {s['n']})"

    lines = ["\n#10 a framework's calls on the desk (reviewdesk_client), p50 / p95:"]
    lines.append(line("external submit → card", r["submit_to_card"]))
    lines.append(line("the desk's own run: submit → card", r["own_submit_to_card"]))
    lines.append(line("decision → framework's tool starts, SSE", r["sse"]))
    lines.append(line("decision → framework's tool starts, webhook", r["webhook"]))
    lines.append(line("the desk's own resume: decision → tool starts", r["own_resume"]))
    lines.append(line("  of which: decision → event on the SSE stream", r["sse_arrival"]))
    lines.append(line("  of which: decision → webhook received", r["webhook_arrival"]))
    lines.append(line("  of which: verify + consume (POST) in the framework", r["verify_and_consume"]))
    if r["refused"]:
        lines.append("  REFUSED by the client: " + json.dumps(r["refused"]))
    return "\n".join(lines)
