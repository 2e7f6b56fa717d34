"""#12 a decision from Slack: a signed Approve click to /slack/interactions → the tool starts,
beside the same decision made on the desk (the approvals API, as #2 and #3 decide).

The figure runs a desk pair of its own with the Slack app configured (bench/stack.py
`start_slack_desk`), its Web API pointed at the Slack stand-in (tests/slack_stand_in.py) that
this process serves; alice's Slack user is linked to her account. For each sample carol submits
a run whose scripted model calls `send_email` (gated); once its approval is pending, alice
decides it, alternately:

- Slack: the interaction request Slack sends for her click on Approve, form-encoded and signed
  with the app's signing secret (signed before the clock starts: that is Slack's work);
- desk: `POST /api/v1/approvals/{id}/decision` with her token.

Both are timed from the request being sent (this process's clock) to the tool starting: the
`send_email` of the bench's world entered in the worker (bench/world.py's `bench:tools` record,
the observable #2 ends on). Same processes, same runs, interleaved: the ratio is Slack's cost
over the desk's own path (the signature check and replay record, the link's lookup, the
ephemeral reply the click answers with), not the machine's mood. Each request's own round trip
(sent → response) is reported too.
"""

from __future__ import annotations

import asyncio
import json
import math
import statistics
import time
from typing import Any

import httpx

from bench.common import Row, ms, size, wait_records
from bench.cycle import script

ALICE_IN_SLACK = "U0BENCHALICE"


def p95(samples: list[float]) -> float | None:
    if not samples:
        return None
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def _pending(run_id: str, timeout: float) -> dict[str, str]:
    """The run's approval, once it is pending: its id and checkpoint (what a button carries)."""
    from reviewdesk.approvals.models import ApprovalRequest, ApprovalStatus

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = (
            ApprovalRequest.objects.filter(run_id=run_id, status=ApprovalStatus.PENDING)
            .values("id", "checkpoint_id")
            .first()
        )
        if found:
            return {"approval": str(found["id"]), "checkpoint": str(found["checkpoint_id"])}
        time.sleep(0.01)
    raise TimeoutError(f"run {run_id}: no pending approval after {timeout}s")


async def one(http: httpx.AsyncClient, people, redis, via: str) -> dict[str, Any]:
    from reviewdesk.slack.blocks import APPROVE
    from tests.slack_stand_in import click, interaction_body, signed_headers

    response = await http.post(
        "/api/v1/runs",
        json={"agent": "demo", "input": "Tell Ada.", "model": script()},
        headers={"Authorization": f"Bearer {people.carol_token}"},
    )
    assert response.status_code == 201, response.text
    run_id = response.json()["id"]
    target = await asyncio.to_thread(_pending, run_id, 30)
    if via == "slack":
        body = interaction_body(click(APPROVE, json.dumps(target), user=ALICE_IN_SLACK))
        headers = {**signed_headers(body), "Content-Type": "application/x-www-form-urlencoded"}
        sent = time.time()
        response = await http.post("/slack/interactions", content=body, headers=headers)
        answered = time.time()
        assert response.status_code == 200, response.text
    else:
        sent = time.time()
        response = await http.post(
            f"/api/v1/approvals/{target['approval']}/decision",
            json={"verdict": "approve", "reason": "ok", "checkpoint_id": target["checkpoint"]},
            headers={"Authorization": f"Bearer {people.alice_token}"},
        )
        answered = time.time()
        assert response.status_code == 201, response.text
    tool = await asyncio.to_thread(wait_records, redis, "bench:tools", lambda x: run_id in x["key"], 30.0)
    assert tool is not None, f"run {run_id} ({via}): the tool never started"
    return {"via": via, "start": ms(tool["at"] - sent), "answer": ms(answered - sent)}


async def measure(stack, people, redis, budget: float) -> list[Row]:
    from bench import stack as stack_mod
    from reviewdesk.slack.models import SlackLink
    from tests.slack_stand_in import BOT_TOKEN, SIGNING_SECRET, TEAM, SlackStandIn

    deadline = time.monotonic() + budget
    slack = SlackStandIn()
    slack.up()
    procs, url = await asyncio.to_thread(
        stack_mod.start_slack_desk,
        stack,
        {"SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_SIGNING_SECRET": SIGNING_SECRET, "SLACK_API_URL": slack.url},
    )
    SlackLink.objects.update_or_create(
        user=people.alice, defaults={"team_id": TEAM, "slack_user_id": ALICE_IN_SLACK, "notify": True}
    )
    pairs = size(8, 60)
    done: list[dict[str, Any]] = []
    try:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            for via in ("slack", "desk"):  # warm: imports, connections, first-use caches
                await one(http, people, redis, via)
            for i in range(pairs):
                if time.monotonic() > deadline:
                    break
                # Alternate which goes first, so neither always follows the other's run.
                for via in ("slack", "desk") if i % 2 == 0 else ("desk", "slack"):
                    done.append(await one(http, people, redis, via))
    finally:
        SlackLink.objects.filter(user=people.alice).delete()
        for proc in procs:
            await asyncio.to_thread(stack.stop_one, proc)
        slack.down()
    by = {via: [d for d in done if d["via"] == via] for via in ("slack", "desk")}
    start = {via: [d["start"] for d in rows] for via, rows in by.items()}
    answer = {via: [d["answer"] for d in rows] for via, rows in by.items()}
    stats = {
        name: {
            via: {"p50": statistics.median(v) if v else None, "p95": p95(v), "n": len(v)}
            for via, v in samples.items()
        }
        for name, samples in (("tool_start", start), ("answer", answer))
    }
    posted = {
        method: len(slack.of(method)) for method in ("chat.postMessage", "chat.update", "chat.postEphemeral")
    }
    return [
        Row(
            "12",
            "Slack: signed Approve click sent → tool start",
            "ms",
            start["slack"],
            floor="the desk's decision (API POST) sent → tool start",
            floor_samples=start["desk"],
            target="reported beside the desk's own (p50 and p95)",
            extra={"slack_click": {"stats": stats, "pairs": len(by["slack"]), "stand_in_calls": posted}},
        )
    ]


def slack_click_text(s: dict[str, Any]) -> str:
    def line(name: str, what: str) -> str:
        side = s["stats"][name]
        ratio = (
            f"{side['slack']['p50'] / side['desk']['p50']:.2f}x"
            if side["slack"]["p50"] and side["desk"]["p50"]
            else "—"
        )
        return (
            f"  {what}: Slack p50 {side['slack']['p50'] or 0:.1f} ms, p95 {side['slack']['p95'] or 0:.1f} ms | "
            f"desk p50 {side['desk']['p50'] or 0:.1f} ms, p95 {side['desk']['p95'] or 0:.1f} ms | "
            f"Slack/desk p50 {ratio} (n {side['slack']['n']}/{side['desk']['n']})"
        )

    calls = ", ".join(f"{k} {v}" for k, v in s["stand_in_calls"].items())
    return "\n".join(
        [
            f"\n#12 a decision from Slack beside the desk's, {s['pairs']} each, interleaved on one Slack-enabled pair:",
            line("tool_start", "sent → tool start"),
            line("answer", "sent → response"),
            f"  the stand-in took: {calls}",
        ]
    )
