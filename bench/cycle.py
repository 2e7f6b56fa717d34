"""#1 push, #2 resume and #3 the whole cycle, from the same sequential cycles.

One cycle, as a client sees it: carol submits a run whose scripted model calls
`send_email` (gated) then answers; alice's socket gets `approval.created`; alice approves
through the API; her socket gets `run.updated` succeeded. The probe in the desk's
processes gives the commit times and the tool's start, so:

- #1 push = interrupt commit (in the worker) → `approval.created` on alice's socket;
  floor: a bare `group_send` to a bare consumer on the same channel layer.
- #2 resume = decision commit (in the web process) → the tool starts (in the worker);
  floor: a bare Celery task's enqueue → start, with the desk's Celery settings.
- #3 the cycle's parts: HTTP, socket arrival, queue waits, task times, and statements
  and transactions per cycle (web and worker, counted by the probe).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx

from bench import floor
from bench.common import Row, Socket, counters, ms, read_records, size, summary, wait_records
from bench.floor_asgi import FLOOR_GROUP

EMAIL = {"to": "ada@example.com", "subject": "Refund", "body": "It is on its way."}


def script() -> dict[str, Any]:
    return {
        "provider": "scripted",
        "script": [{"tool_calls": [{"name": "send_email", "arguments": EMAIL}]}, {"content": "Emailed Ada."}],
    }


async def one_cycle(http: httpx.AsyncClient, sock: Socket, people, timeout: float) -> dict[str, Any]:
    t = {"submit": time.time()}
    response = await http.post(
        "/api/v1/runs",
        json={"agent": "demo", "input": "Tell Ada.", "model": script()},
        headers={"Authorization": f"Bearer {people.carol_token}"},
    )
    t["submitted"] = time.time()
    assert response.status_code == 201, response.text
    run_id = response.json()["id"]
    t["created"], created = await sock.wait_for(
        lambda m: m.get("type") == "approval.created" and m["data"]["run"] == run_id, timeout
    )
    approval = created["data"]
    t["decide"] = time.time()
    response = await http.post(
        f"/api/v1/approvals/{approval['id']}/decision",
        json={"verdict": "approve", "reason": "ok", "checkpoint_id": approval["checkpoint_id"]},
        headers={"Authorization": f"Bearer {people.alice_token}"},
    )
    t["decided"] = time.time()
    assert response.status_code == 201, response.text
    t["updated"], updated = await sock.wait_for(
        lambda m: m.get("type") == "approval.updated" and m["data"]["id"] == approval["id"], timeout
    )
    t["done"], _ = await sock.wait_for(
        lambda m: (
            m.get("type") == "run.updated"
            and m["data"]["id"] == run_id
            and m["data"]["status"] == "succeeded"
        ),
        timeout,
    )
    return {"run": run_id, "t": t, "created_seq": created["seq"], "decided_seq": updated["seq"]}


async def measure(stack, people, redis, budget: float) -> list[Row]:
    cycles = size(5, 40)
    deadline = time.monotonic() + budget
    sock = await Socket().open(stack.desk_url.replace("http", "ws") + "/ws/desk/", cookie=people.alice_cookie)
    await sock.wait_for(lambda m: m.get("type") == "snapshot", 30)
    web0, worker0 = counters(redis, "web"), counters(redis, "worker")
    done: list[dict[str, Any]] = []
    async with httpx.AsyncClient(base_url=stack.desk_url, timeout=30) as http:
        await one_cycle(http, sock, people, 30)  # warm: imports, connections, first-use caches
        time.sleep(0.3)
        web0, worker0 = counters(redis, "web"), counters(redis, "worker")
        for _ in range(cycles):
            if time.monotonic() > deadline:
                break
            done.append(await one_cycle(http, sock, people, 30))
    await sock.close()
    time.sleep(0.3)  # let the probes flush
    web1, worker1 = counters(redis, "web"), counters(redis, "worker")
    runs = {c["run"] for c in done}

    events = {e["seq"]: e for e in read_records(redis, "bench:events")}
    tools = read_records(redis, "bench:tools")
    tasks = [task for task in read_records(redis, "bench:tasks") if task["run"] in runs]

    push, resume = [], []
    # #2 split in three: the web's work after its commit until the resume task is sent, the
    # queue (broker → worker), and the task's own work from its start to the tool's start.
    resume_parts: dict[str, list[float]] = {
        "resume: decision commit → task sent": [],
        "resume: task start → tool start": [],
    }
    for c in done:
        created = events.get(c["created_seq"]) or wait_records(
            redis, "bench:events", lambda e, seq=c["created_seq"]: e["seq"] == seq
        )
        if created and created["commit"]:
            push.append(ms(c["t"]["created"] - created["commit"]))
        decided = events.get(c["decided_seq"])
        tool = next((x for x in tools if c["run"] in x["key"]), None)
        if decided and decided["commit"] and tool:
            resume.append(ms(tool["at"] - decided["commit"]))
            task = next((x for x in tasks if x["run"] == c["run"] and x["name"] == "runs.resume"), None)
            if task and task["sent"]:
                resume_parts["resume: decision commit → task sent"].append(
                    ms(task["sent"] - decided["commit"])
                )
                resume_parts["resume: task start → tool start"].append(ms(tool["at"] - task["start"]))

    push_floor = await floor_push(stack, size(20, 200), deadline + 10)
    # The same floor at the desk's pace: its pushes come one per cycle, to processes that were
    # idle in between, while the floor above sends the next message as soon as one arrives.
    # Reported beside #1, not its target: the issue names the floor above.
    paced_floor = await floor_push(stack, size(10, 60), deadline + 10, pause=paced)
    hop_floor = floor_hop(redis, size(20, 200), deadline + 10)
    # And the hop at the desk's pace: a decision's task reaches a worker that was idle.
    paced_hop_floor = floor_hop(redis, size(10, 60), deadline + 10, pause=paced)

    n = max(len(done), 1)
    per_cycle = {
        f"{role} {what}": (after.get(what, 0) - before.get(what, 0)) / n
        for role, before, after in (("web", web0, web1), ("worker", worker0, worker1))
        for what in ("statements", "transactions")
    }
    by_task: dict[str, dict[str, list[float]]] = {}
    for task in tasks:
        into = by_task.setdefault(
            task["name"], {"queue_wait": [], "duration": [], "statements": [], "transactions": []}
        )
        if task["sent"]:
            into["queue_wait"].append(ms(task["start"] - task["sent"]))
        into["duration"].append(ms(task["end"] - task["start"]))
        into["statements"].append(task["statements"])
        into["transactions"].append(task["transactions"])
    parts = {
        "submit POST → 201": [ms(c["t"]["submitted"] - c["t"]["submit"]) for c in done],
        "submit → approval.created on socket": [ms(c["t"]["created"] - c["t"]["submit"]) for c in done],
        "decision POST → 201": [ms(c["t"]["decided"] - c["t"]["decide"]) for c in done],
        "decision POST → run.updated succeeded": [ms(c["t"]["done"] - c["t"]["decide"]) for c in done],
    }
    parts.update(resume_parts)
    for name, values in sorted(by_task.items()):
        for what, samples in values.items():
            parts[f"task {name}: {what.replace('_', ' ')}"] = samples
    breakdown = {name: summary(samples) for name, samples in parts.items()}
    whole = [ms(c["t"]["done"] - c["t"]["submit"]) for c in done]
    return [
        Row(
            "1",
            "push: interrupt commit → approval.created on socket",
            "ms",
            push,
            floor="bare group_send → bare consumer",
            floor_samples=push_floor,
            max_ratio=2.0,
            target="p50 ≤ 2x floor",
        ),
        Row(
            "1p",
            "push (#1) against the floor sent at the desk's pace",
            "ms",
            push,
            floor="bare group_send → bare consumer, 30-90 ms apart",
            floor_samples=paced_floor,
            target="reported: the floor at the desk's pace",
        ),
        Row(
            "2",
            "resume: decision commit → tool start",
            "ms",
            resume,
            floor="bare Celery enqueue → start",
            floor_samples=hop_floor,
            max_ratio=3.0,
            target="p50 ≤ 3x floor",
        ),
        Row(
            "2p",
            "resume (#2) against the hop sent at the desk's pace",
            "ms",
            resume,
            floor="bare Celery enqueue → start, 30-90 ms apart",
            floor_samples=paced_hop_floor,
            target="reported: the floor at the desk's pace",
        ),
        Row(
            "3",
            "whole cycle: submit → … → run.updated succeeded",
            "ms",
            whole,
            target="(broken down in results.json)",
            extra={"breakdown": breakdown, "per_cycle": per_cycle, "cycles": len(done)},
        ),
    ]


def paced(i: int) -> float:
    """Seconds to wait before the floor's i-th send at the desk's pace: 30-90 ms, as a cycle's
    pushes are spaced (a fixed cycle, so every run waits alike)."""
    return 0.03 + (i % 7) * 0.01


async def floor_push(stack, count: int, deadline: float, pause=None) -> list[float]:
    """A bare group_send's time to a bare consumer, each send right after the last arrived;
    with `pause(i)`, that many seconds of quiet before the i-th."""
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    sock = await Socket().open(stack.floor_url.replace("http", "ws") + "/ws/floor/", raw=True)
    await asyncio.sleep(0.2)  # the consumer joins its group after accepting
    samples = []
    for i in range(count + 3):
        if time.monotonic() > deadline:
            break
        if pause is not None:
            await asyncio.sleep(pause(i))
        sent = time.time()
        await layer.group_send(FLOOR_GROUP, {"type": "floor.message", "text": str(i)})
        at, _ = await sock.wait_for(lambda m, i=i: m == str(i), 10)
        if i >= 3:  # the first few warm the layer's connections
            samples.append(ms(at - sent))
    await sock.close()
    return samples


def floor_hop(redis, count: int, deadline: float, pause=None) -> list[float]:
    """A bare Celery task's enqueue → start, each sent once the last started; with
    `pause(i)`, that many seconds of quiet before the i-th."""
    redis.delete("bench:floor:hop")
    for i in range(count + 3):
        if time.monotonic() > deadline:
            break
        if pause is not None:
            time.sleep(pause(i))
        # One at a time, like the desk's resume: enqueue, then wait for the start.
        target = redis.llen("bench:floor:hop") + 1
        floor.app.send_task("floor.hop", args=[time.time()])
        wait_until = time.monotonic() + 10
        while redis.llen("bench:floor:hop") < target and time.monotonic() < wait_until:
            time.sleep(0.001)
    hops = [json.loads(x) for x in redis.lrange("bench:floor:hop", 0, -1)][3:]
    return [ms(start - sent) for sent, start in hops]
