"""#6 throughput: full cycles per second with the desk's 2 worker processes, decisions
through the API as soon as each approval reaches alice's socket; floor: bare no-op Celery
tasks per second on a 2-process worker with the desk's settings (acks_late, prefetch 1).
#6w: the same cycles with two web processes taking the requests in turn (reported)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time

import httpx

from bench import floor
from bench.common import Row, Socket, counters, read_records, size
from bench.cycle import script
from bench.stack import DESK_APP, cpu_breakdown, machine_cpu, start_daphne, wait_daphne


async def measure(stack, people, redis, budget: float) -> list[Row]:
    runs = size(10, 60)
    one = await cycles_through(stack, people, redis, budget, runs, [stack.desk_url])
    # The same cycles with a second web process beside the first, requests alternating between
    # them, as behind a load balancer (README, scale-out). Daphne runs a process's sync views
    # one at a time, on one thread: with one web process, its requests queue behind each other.
    desk2, desk2_url = start_daphne(stack, "desk-web-2", DESK_APP)
    try:
        await asyncio.to_thread(wait_daphne, desk2_url, DESK_APP)
        two = await cycles_through(stack, people, redis, budget, runs, [stack.desk_url, desk2_url])
    finally:
        stack.stop_one(desk2)

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
    floor_text = "bare no-op Celery tasks/s, 2 processes"
    return [
        Row(
            "6",
            "throughput: full cycles/s, 2 worker processes",
            "/s",
            one.pop("rate"),
            floor=floor_text,
            floor_samples=rate,
            min_ratio=0.1,
            target="≥ 1/10 of floor",
            extra={**one, "noops": noops, "noops_done": done},
        ),
        Row(
            "6w",
            "throughput as #6, 2 web processes",
            "/s",
            two.pop("rate"),
            floor=floor_text,
            floor_samples=rate,
            target="reported: #6 with the web scaled out",
            extra=two,
        ),
    ]


async def cycles_through(stack, people, redis, budget: float, runs: int, urls: list[str]) -> dict:
    """Submit `runs` runs and approve each as its approval reaches alice's socket (on the first
    web process), the requests taking `urls` in turn; the rate of cycles, and where they went."""
    sock = await Socket().open(urls[0].replace("http", "ws") + "/ws/desk/", cookie=people.alice_cookie)
    await sock.wait_for(lambda m: m.get("type") == "snapshot", 30)
    mine: set[str] = set()
    finished: dict[str, float] = {}
    all_done = asyncio.Event()
    pending: list[asyncio.Task] = []
    limit = asyncio.Semaphore(8)  # requests in flight, like a handful of busy clients
    clients = [httpx.AsyncClient(base_url=url, timeout=60) for url in urls]
    turn = itertools.cycle(clients)

    async def decide(approval: dict) -> None:
        async with limit:
            response = await next(turn).post(
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
            response = await next(turn).post(
                "/api/v1/runs",
                json={"agent": "demo", "input": "Tell Ada.", "model": script()},
                headers={"Authorization": f"Bearer {people.carol_token}"},
            )
            assert response.status_code == 201, response.text
            run_id = response.json()["id"]
            mine.add(run_id)
            if run_id in early:
                pending.append(asyncio.create_task(decide(early.pop(run_id))))

    try:
        locks_before = {role: counters(redis, role) for role in ("web", "worker")}
        cpu_before, machine_before = stack.cpu_snapshot(), machine_cpu()
        start = time.time()
        await asyncio.gather(*(submit() for _ in range(runs)))
        with contextlib.suppress(TimeoutError):  # a short run is reported as such, not failed
            await asyncio.wait_for(all_done.wait(), budget)
        await asyncio.gather(*pending, return_exceptions=True)
        cpu_after, machine_after = stack.cpu_snapshot(), machine_cpu()
    finally:
        for client in clients:
            await client.aclose()
        await sock.close()
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
    locks_after = {role: counters(redis, role) for role in ("web", "worker")}
    return {
        "rate": [len(finished) / wall] if finished else [],
        "web_processes": len(urls),
        "runs": runs,
        "finished": len(finished),
        "worker": worker,
        "cpu_ms_per_cycle": cpu_per_cycle(
            cpu_breakdown(cpu_before, cpu_after),
            [after - before for before, after in zip(machine_before, machine_after, strict=True)],
            len(finished),
        ),
        "writers_lock_ms_per_cycle": lock_per_cycle(locks_before, locks_after, len(finished)),
    }


def lock_per_cycle(before: dict, after: dict, cycles: int) -> dict:
    """The writers' lock (PostgreSQL's advisory locks, reviewdesk/db.py), per cycle and by role:
    how many times it was taken, the ms spent waiting for it, the ms it was held (taken →
    transaction end) and of those the ms spent in the commit. Held time is the lock's own
    budget: one holder at a time."""
    if not cycles:
        return {}
    out = {}
    for role in after:
        spent = {
            k: after[role].get(k, 0) - before.get(role, {}).get(k, 0)
            for k in ("locks", "lock_wait_us", "lock_hold_us", "lock_commit_us")
        }
        if spent["locks"]:
            out[role] = {
                "taken": round(spent["locks"] / cycles, 1),
                "wait_ms": round(spent["lock_wait_us"] / 1000 / cycles, 1),
                "held_ms": round(spent["lock_hold_us"] / 1000 / cycles, 1),
                "commit_ms": round(spent["lock_commit_us"] / 1000 / cycles, 1),
            }
    return out


def cpu_per_cycle(used: dict[str, float], machine: list[float], cycles: int) -> dict:
    """Where a cycle's CPU went, in ms per cycle: the web, the worker with its forks, this
    driver, PostgreSQL's and Redis's processes and anything else on the machine ("other"), by
    process (`used`); what the machine's own count (`machine`: busy, idle) saw busy beyond
    those ("unattributed"); and its idle time."""
    if not cycles:
        return {}
    per_cycle = {who: seconds * 1000 / cycles for who, seconds in used.items()}
    out = {who: round(ms, 1) for who, ms in sorted(per_cycle.items(), key=lambda item: -item[1]) if ms > 0}
    busy, idle = (seconds * 1000 / cycles for seconds in machine)
    out["unattributed"] = round(max(busy - sum(per_cycle.values()), 0.0), 1)
    out["idle"] = round(idle, 1)
    return out
