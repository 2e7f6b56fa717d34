"""#6 throughput: full cycles per second with the desk's 2 worker processes, decisions
through the API as soon as each approval reaches alice's socket; floor: bare no-op Celery
tasks per second on a 2-process worker with the desk's settings (acks_late, prefetch 1).
#6w: the same cycles with two web processes taking the requests in turn (reported)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from bench import floor
from bench.common import Row, Socket, counters, read_records, size
from bench.cycle import script
from bench.stack import (
    DESK_APP,
    cpu_breakdown,
    free_port,
    machine_cpu,
    start_daphne,
    wait_celery,
    wait_daphne,
)


async def measure(stack, people, redis, budget: float) -> list[Row]:
    runs = size(10, 60)
    one = await cycles_through(stack, people, redis, budget, runs, [stack.desk_url])
    # The same cycles with a second web process beside the first, requests alternating between
    # them, as behind a load balancer (docs/running.md, "Several hosts"). Daphne runs a process's sync views
    # one at a time, on one thread: with one web process, its requests queue behind each other.
    desk2, desk2_url = start_daphne(stack, "desk-web-2", DESK_APP)
    try:
        await asyncio.to_thread(wait_daphne, desk2_url, DESK_APP)
        two = await cycles_through(stack, people, redis, budget, runs, [stack.desk_url, desk2_url])
    finally:
        stack.stop_one(desk2)
    skeleton = await skeleton_cycles(stack, people, budget, runs)

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

    def reported(row_id: str, figure: str, result: dict, target: str) -> Row:
        """A rate beside #6, against the same floor, with no target of its own."""
        rate_of = result.pop("rate")
        return Row(
            row_id, figure, "/s", rate_of, floor=floor_text, floor_samples=rate, target=target, extra=result
        )

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
        reported("6w", "throughput as #6, 2 web processes", two, "reported: #6 with the web scaled out"),
        reported(
            "6s",
            "the skeleton: #6's requests and tasks, no desk work",
            skeleton,
            "reported: the ceiling of #6 here",
        ),
    ]


@dataclass
class Flow:
    """One kind of cycle as a client drives it: where its socket is, where a cycle starts (carol
    POSTs the bench's run there, the response names it), which socket message asks for the
    decision (`asked` -> the run's id, or None) and which ends the cycle (`ended`), and the
    decision alice POSTs for an asking message (`decision` -> its path and body)."""

    socket_path: str
    submit_path: str
    asked: Callable[[dict], str | None]
    ended: Callable[[dict], str | None]
    decision: Callable[[dict], tuple[str, dict]]
    cookie: str | None = None
    snapshot: bool = False  # the socket's first message is a snapshot, waited for


def desk_flow(people) -> Flow:
    """carol submits through the API; alice approves through the API as its approval arrives."""

    def asked(message: dict) -> str | None:
        return message["data"].get("run") if message.get("type") == "approval.created" else None

    def ended(message: dict) -> str | None:
        data = message.get("data") or {}
        done = message.get("type") == "run.updated" and data.get("status") == "succeeded"
        return data.get("id") if done else None

    def decision(message: dict) -> tuple[str, dict]:
        approval = message["data"]
        body = {"verdict": "approve", "reason": "ok", "checkpoint_id": approval["checkpoint_id"]}
        return f"/api/v1/approvals/{approval['id']}/decision", body

    return Flow(
        "/ws/desk/", "/api/v1/runs", asked, ended, decision, cookie=people.alice_cookie, snapshot=True
    )


def skeleton_flow() -> Flow:
    """The skeleton's cycle (bench/skeleton.py): the same requests, tokens and bodies' shape."""

    def asked(message: dict) -> str | None:
        return message.get("run") if message.get("type") == "asked" else None

    def ended(message: dict) -> str | None:
        return message.get("run") if message.get("type") == "done" else None

    def decision(message: dict) -> tuple[str, dict]:
        body = {"verdict": "approve", "reason": "ok", "checkpoint_id": message["run"]}
        return f"/skeleton/decide/{message['run']}", body

    return Flow("/ws/skeleton/", "/skeleton/submit", asked, ended, decision)


async def created(client: httpx.AsyncClient, path: str, body: dict, token: str) -> dict:
    """POST `body` with a bearer token; the 201's JSON."""
    response = await client.post(path, json=body, headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 201, response.text
    return response.json()


async def drive(flow: Flow, stack, people, budget: float, runs: int, urls: list[str]) -> dict:
    """Start `runs` cycles and go on with each as the socket (on the first URL) asks, 8 requests
    in flight like a handful of busy clients, the requests taking `urls` in turn: the run ids,
    when each ended, the wall time from the first submit, and the CPU spent meanwhile."""
    sock = await Socket().open(urls[0].replace("http", "ws") + flow.socket_path, cookie=flow.cookie)
    if flow.snapshot:
        await sock.wait_for(lambda m: m.get("type") == "snapshot", 30)
    mine: set[str] = set()
    finished: dict[str, float] = {}
    all_done = asyncio.Event()
    pending: list[asyncio.Task] = []
    limit = asyncio.Semaphore(8)
    clients = [httpx.AsyncClient(base_url=url, timeout=60) for url in urls]
    turn = itertools.cycle(clients)

    async def decide(message: dict) -> None:
        path, body = flow.decision(message)
        async with limit:
            await created(next(turn), path, body, people.alice_token)

    # A socket can ask before the submit's response has named the run: held until then.
    early: dict[str, dict] = {}

    def on_message(at: float, message: dict) -> None:
        if (run_id := flow.asked(message)) is not None:
            if run_id in mine:
                pending.append(asyncio.create_task(decide(message)))
            else:
                early[run_id] = message
        elif (run_id := flow.ended(message)) is not None and run_id in mine:
            finished.setdefault(run_id, at)
            if len(finished) == runs:
                all_done.set()

    sock.on_message = on_message

    submission = {"agent": "demo", "input": "Tell Ada.", "model": script()}

    async def submit() -> None:
        async with limit:
            run_id = (await created(next(turn), flow.submit_path, submission, people.carol_token))["id"]
            mine.add(run_id)
            if run_id in early:
                pending.append(asyncio.create_task(decide(early.pop(run_id))))

    try:
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
    wall = (max(finished.values()) - start) if finished else 0.0
    return {
        "mine": mine,
        "finished": finished,
        "wall": wall,
        "rate": [len(finished) / wall] if finished else [],
        "cpu_ms_per_cycle": cpu_per_cycle(
            cpu_breakdown(cpu_before, cpu_after),
            [after - before for before, after in zip(machine_before, machine_after, strict=True)],
            len(finished),
        ),
    }


async def cycles_through(stack, people, redis, budget: float, runs: int, urls: list[str]) -> dict:
    """Submit `runs` runs and approve each as its approval reaches alice's socket (on the first
    web process), the requests taking `urls` in turn; the rate of cycles, and where they went."""
    locks_before = {role: counters(redis, role) for role in ("web", "worker")}
    driven = await drive(desk_flow(people), stack, people, budget, runs, urls)
    mine, finished, wall = driven["mine"], driven["finished"], driven["wall"]
    # Where the time went: the worker processes' busy share of the wall time (2 processes).
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
        "rate": driven["rate"],
        "web_processes": len(urls),
        "runs": runs,
        "finished": len(finished),
        "worker": worker,
        "cpu_ms_per_cycle": driven["cpu_ms_per_cycle"],
        "writers_lock_ms_per_cycle": lock_per_cycle(locks_before, locks_after, len(finished)),
    }


SKELETON_QUEUE = "bench-skeleton"


def start_skeleton(stack) -> tuple[list, str]:
    """The skeleton's daphne and its 2-process worker (bench/skeleton.py), on a queue of its own;
    (the processes, its URL)."""
    env = {
        **stack.web_env,
        "DJANGO_SETTINGS_MODULE": "bench.skeleton_settings",
        "DESK_CELERY_QUEUE": SKELETON_QUEUE,
    }
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env["DESK_WS_ALLOWED_ORIGINS"] = url
    daphne = [
        sys.executable,
        "-m",
        "daphne",
        "-b",
        "127.0.0.1",
        "-p",
        str(port),
        "bench.skeleton_asgi:application",
    ]
    worker = [
        *(
            sys.executable,
            "-m",
            "celery",
            "-A",
            "bench.skeleton_worker",
            "worker",
            "-l",
            "WARNING",
            "-c",
            "2",
        ),
        *("--without-gossip", "--without-mingle", "-Q", SKELETON_QUEUE, "-n", "skeleton@%h"),
    ]
    return [stack.start("skeleton-web", daphne, env), stack.start("skeleton-worker", worker, env)], url


async def skeleton_cycles(stack, people, budget: float, runs: int) -> dict:
    """#6's cycles with none of the desk's work (bench/skeleton.py), driven as #6 drives the desk's."""
    procs, url = start_skeleton(stack)
    try:
        await asyncio.to_thread(wait_daphne, url, DESK_APP)
        await asyncio.to_thread(wait_celery, "skeleton@")
        # A fresh process's first requests are slow: a few cycles first, not counted.
        await drive(skeleton_flow(), stack, people, budget, 5, [url])
        driven = await drive(skeleton_flow(), stack, people, budget, runs, [url])
    finally:
        for proc in procs:
            stack.stop_one(proc)
    return {
        "rate": driven["rate"],
        "runs": runs,
        "finished": len(driven["finished"]),
        "web_processes": 1,
        "cpu_ms_per_cycle": driven["cpu_ms_per_cycle"],
    }


def lock_per_cycle(before: dict, after: dict, cycles: int) -> dict:
    """The writers' lock (PostgreSQL's advisory locks, reviewdesk/lib/db.py), per cycle and by role:
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
