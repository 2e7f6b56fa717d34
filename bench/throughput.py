"""#6 throughput: full cycles per second with the desk's 2 worker processes, decisions
through the API as soon as each approval reaches alice's socket; floor: bare no-op Celery
tasks per second on a 2-process worker with the desk's settings (acks_late, prefetch 1)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time

import httpx

from bench import floor
from bench.common import Row, Socket, read_records, size
from bench.cycle import script
from bench.stack import cpu_breakdown


async def measure(stack, people, redis, budget: float) -> list[Row]:
    runs = size(10, 60)
    sock = await Socket().open(stack.desk_url.replace("http", "ws") + "/ws/desk/", cookie=people.alice_cookie)
    await sock.wait_for(lambda m: m.get("type") == "snapshot", 30)
    mine: set[str] = set()
    finished: dict[str, float] = {}
    all_done = asyncio.Event()
    pending: list[asyncio.Task] = []
    limit = asyncio.Semaphore(8)  # requests in flight, like a handful of busy clients

    async with httpx.AsyncClient(base_url=stack.desk_url, timeout=60) as http:

        async def decide(approval: dict) -> None:
            async with limit:
                response = await http.post(
                    f"/api/v1/approvals/{approval['id']}/decision",
                    json={"verdict": "approve", "reason": "ok", "checkpoint_id": approval["checkpoint_id"]},
                    headers={"Authorization": f"Bearer {people.alice_token}"},
                )
                assert response.status_code == 201, response.text

        # An approval can reach the socket before its run's submit response: held until then.
        early: dict[str, dict] = {}

        def on_message(at: float, message: dict) -> None:
            kind, data = message.get("type"), message.get("data") or {}
            if kind == "approval.created" and data.get("run") in mine:
                pending.append(asyncio.create_task(decide(data)))
            elif kind == "approval.created":
                early[data.get("run")] = data
            elif kind == "run.updated" and data.get("id") in mine and data.get("status") == "succeeded":
                finished.setdefault(data["id"], at)
                if len(finished) == runs:
                    all_done.set()

        sock.on_message = on_message

        async def submit() -> None:
            async with limit:
                response = await http.post(
                    "/api/v1/runs",
                    json={"agent": "demo", "input": "Tell Ada.", "model": script()},
                    headers={"Authorization": f"Bearer {people.carol_token}"},
                )
                assert response.status_code == 201, response.text
                run_id = response.json()["id"]
                mine.add(run_id)
                if run_id in early:
                    pending.append(asyncio.create_task(decide(early.pop(run_id))))

        cpu_before, cpu_since = stack.cpu_snapshot(), time.monotonic()
        start = time.time()
        await asyncio.gather(*(submit() for _ in range(runs)))
        with contextlib.suppress(TimeoutError):  # a short run is reported as such, not failed
            await asyncio.wait_for(all_done.wait(), budget)
        await asyncio.gather(*pending, return_exceptions=True)
        cpu_after, cpu_window = stack.cpu_snapshot(), time.monotonic() - cpu_since
    await sock.close()
    cycles = [len(finished) / (max(finished.values()) - start)] if finished else []
    # Where the time went: the worker processes' busy share of the wall time (2 processes).
    wall = (max(finished.values()) - start) if finished else 0.0
    time.sleep(0.2)  # the probes flush every 50 ms
    tasks = [t for t in read_records(redis, "bench:tasks") if t["run"] in mine]
    busy = {
        name: round(sum(t["end"] - t["start"] for t in tasks if t["name"] == name), 3)
        for name in sorted({t["name"] for t in tasks})
    }
    worker = {"wall_s": round(wall, 3), "busy_s": busy, "tasks": len(tasks)}
    if wall:
        worker["busy_share_of_2_processes"] = round(sum(busy.values()) / (2 * wall), 3)
    cpu = cpu_per_cycle(cpu_before, cpu_after, len(finished), cpu_window)

    noops = size(300, 3000)
    redis.delete("bench:floor:noop", "bench:floor:noop_at")
    begin = time.time()
    for _ in range(noops):
        floor.app.send_task("floor.noop")
    deadline = time.monotonic() + budget
    while int(redis.get("bench:floor:noop") or 0) < noops and time.monotonic() < deadline:
        time.sleep(0.01)
    done = int(redis.get("bench:floor:noop") or 0)
    rate = [done / (float(redis.get("bench:floor:noop_at")) - begin)] if done else []
    return [
        Row(
            "6",
            "throughput: full cycles/s, 2 worker processes",
            "/s",
            cycles,
            floor="bare no-op Celery tasks/s, 2 processes",
            floor_samples=rate,
            min_ratio=0.1,
            target="≥ 1/10 of floor",
            extra={
                "runs": runs,
                "finished": len(finished),
                "noops": noops,
                "noops_done": done,
                "worker": worker,
                "cpu_ms_per_cycle": cpu,
            },
        )
    ]


def cpu_per_cycle(before: dict, after: dict, cycles: int, window: float) -> dict:
    """Where a cycle's CPU went, in ms per cycle: the web, the worker with its forks, this
    driver, PostgreSQL's and Redis's processes, anything else on the machine ("other"), and
    the CPUs' idle time over the `window` seconds between the two snapshots."""
    if not cycles:
        return {}
    used = {who: seconds * 1000 / cycles for who, seconds in cpu_breakdown(before, after).items()}
    used = {who: round(ms, 1) for who, ms in sorted(used.items(), key=lambda item: -item[1]) if ms > 0}
    capacity = (os.cpu_count() or 1) * window * 1000 / cycles
    used["idle"] = round(max(capacity - sum(used.values()), 0.0), 1)
    return used
