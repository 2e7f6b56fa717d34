"""#8 fan-out: every reviewer's socket, over two ASGI processes, gets each `approval.created`.

A second desk daphne starts beside the stack's, with the same environment (one Origin, as
behind a load balancer). N reviewer sockets (alice, bob and dave in turn) are split over the
two processes, and each waits for its `snapshot`. They open the desk page's socket, as
static/desk/desk.js does: `/ws/desk/?events=approvals`, approval events only (the page has no
use for the rest). One more socket, the run page's (every event), sees each run settle. Then carol submits K runs through the API,
one at a time; each run's scripted model calls `send_email`, so the worker commits an
approval and pushes `approval.created` to every reviewer. For each approval: the time from
its commit (the probe's, in the worker) to the last of the N sockets, and how many sockets
missed the push. The harness never asks for a replay, so whatever arrives came by push; a
delivery missed the push when it had not arrived MISS_AFTER seconds after the commit (the
desk's client would have waited for a heartbeat, 15 s, to notice and replay).

Floor: the same N sockets on the bare consumer (bench/floor_asgi.py), split the same way over
the stack's floor daphne and a second one, and one bare `group_send` from this process per
message, of the same size as the desk's event; the time from the send to the last socket.
Desk and floor messages alternate, so both see the same machine; the floor's turn waits for
the desk's run to go quiet (its `input_required` update, pushed just after the approval, on
the run page's socket).
All sockets are read by this one process, for the desk and the floor alike: on two cores,
spreading them over 2 or 4 client processes moved the floor's last socket by under 15%.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench.common import Row, Socket, ms, size, summary
from bench.cycle import script
from bench.floor_asgi import FLOOR_GROUP
from bench.stack import DESK_APP, FLOOR_APP, start_daphne, wait_daphne

MISS_AFTER = 10.0  # seconds after the commit (or the send): later, or never, is a missed push
WINDOW = 15.0  # seconds after the submit that the harness waits for the last socket
REVIEWERS = ("alice", "bob", "dave")
OPEN_BATCH = 20  # sockets opened at once
SETTLE = 0.05  # seconds of quiet between one message's fan-out and the next's


@dataclass
class Delivery:
    """One message fanned out: when it left (commit or send), and when each socket got it."""

    start: float
    arrivals: list[float | None]
    submit: float | None = None
    match: Callable[[Any], bool] = lambda m: False
    duplicates: int = 0
    meta: dict[str, Any] = field(default_factory=dict)

    def on_time(self) -> list[float]:
        return [at for at in self.arrivals if at is not None and at - self.start <= MISS_AFTER]

    @property
    def missed(self) -> int:
        return len(self.arrivals) - len(self.on_time())

    def to_last(self) -> float:
        """Start → the last socket, in ms. With a socket that missed, the last one came later
        than MISS_AFTER or never: the sample is MISS_AFTER, a lower bound (8b counts them)."""
        if self.missed:
            return ms(MISS_AFTER)
        return ms(max(self.on_time()) - self.start)

    def spread(self) -> dict[str, float]:
        times = sorted(ms(at - self.start) for at in self.on_time())
        if not times:
            return {}
        return {"first": times[0], "median": statistics.median(times), "last": times[-1]}


def reviewer_cookies(people) -> list[str]:
    from django.contrib.auth import get_user_model
    from django.test import Client

    cookies = []
    for username in REVIEWERS:
        if username == "alice":
            cookies.append(people.alice_cookie)
            continue
        client = Client()
        client.force_login(get_user_model().objects.get(username=username))
        cookies.append(f"sessionid={client.cookies['sessionid'].value}")
    return cookies


def desk_page_socket() -> str:
    """The path the desk page's socket opens with no filters (static/desk/desk.js)."""
    from reviewdesk.desk.consumers import APPROVALS_ONLY

    return f"/ws/desk/?events={APPROVALS_ONLY}"


async def open_all(
    count: int,
    urls: list[str],
    *,
    cookies: list[str] | None = None,
    origin: str | None = None,
    path: str = "/ws/desk/",
) -> list[Socket]:
    """`count` sockets spread over `urls` in turn (and over `cookies`), each ready to receive:
    desk sockets (with cookies, at `path`) once their snapshot is in, bare ones once open."""

    async def one(i: int) -> Socket:
        url = urls[i % len(urls)]
        if cookies is None:  # the bare consumer joins its group before it accepts
            return await Socket().open(url + "/ws/floor/")
        sock = await Socket().open(url + path, cookie=cookies[i % len(cookies)], origin=origin)
        # The desk joins its groups before it accepts, then sends the snapshot.
        await sock.wait_for(lambda m: m.get("type") == "snapshot", 60)
        return sock

    socks: list[Socket] = []
    try:
        for start in range(0, count, OPEN_BATCH):
            batch = range(start, min(count, start + OPEN_BATCH))
            socks.extend(await asyncio.gather(*(one(i) for i in batch)))
    except BaseException:
        await close_all(socks)
        raise
    return socks


async def close_all(socks: list[Socket]) -> None:
    await asyncio.gather(*(sock.close() for sock in socks), return_exceptions=True)


async def arrivals(socks: list[Socket], predicate, until: float) -> list[float | None]:
    async def one(sock: Socket) -> float | None:
        try:
            at, _ = await sock.wait_for(predicate, max(0.0, until - time.time()))
        except TimeoutError:
            return None
        return at

    return list(await asyncio.gather(*(one(sock) for sock in socks)))


def copies(socks: list[Socket], predicate) -> int:
    """Messages beyond the first that matched, over all sockets (a push should arrive once)."""
    return sum(max(0, sum(1 for _, m in sock.messages if predicate(m)) - 1) for sock in socks)


async def desk_one(http: httpx.AsyncClient, socks: list[Socket], people, watcher: Socket) -> Delivery:
    from reviewdesk.events.models import DeskEvent

    submit = time.time()
    response = await http.post(
        "/api/v1/runs",
        json={"agent": "demo", "input": "Tell Ada.", "model": script()},
        headers={"Authorization": f"Bearer {people.carol_token}"},
    )
    assert response.status_code == 201, response.text
    run_id = response.json()["id"]

    def created(m: Any) -> bool:
        return m.get("type") == "approval.created" and m["data"]["run"] == run_id

    def settled(m: Any) -> bool:
        data = m.get("data") or {}
        return m.get("type") == "run.updated" and (data.get("id"), data.get("status")) == (
            run_id,
            "input_required",
        )

    got = await arrivals(socks, created, submit + WINDOW)
    # The run's last event (its `input_required`, pushed just after the approval) reaches every
    # socket too, though the desk page's do not send it on: let it land before the floor's
    # turn, so the floor has the machine to itself.
    await arrivals([watcher], settled, time.time() + 5)
    await asyncio.sleep(SETTLE)
    event = DeskEvent.objects.filter(type="approval.created", run_id=run_id).first()
    assert event is not None, f"run {run_id}: no approval.created within {WINDOW} s"
    message = next((m for sock in socks for _, m in sock.messages if created(m)), None)
    return Delivery(
        start=0.0,  # the commit, read from the probe's records once they are flushed
        arrivals=got,
        submit=submit,
        match=created,
        meta={"seq": event.id, "run": run_id, "message": message},
    )


async def floor_one(layer, socks: list[Socket], i: int, payload: dict[str, Any]) -> Delivery:
    def mine(m: Any) -> bool:
        return isinstance(m, dict) and m.get("floor") == i

    text = json.dumps({**payload, "floor": i})
    sent = time.time()
    await layer.group_send(FLOOR_GROUP, {"type": "floor.message", "text": text})
    got = await arrivals(socks, mine, sent + MISS_AFTER)
    await asyncio.sleep(SETTLE)
    return Delivery(start=sent, arrivals=got, match=mine)


def commits(redis, deliveries: list[Delivery]) -> None:
    """Set each desk delivery's start: its event's commit in the worker (the probe's record);
    note when the next event (the run's `input_required`) was pushed, fanning out behind it."""
    from bench.common import read_records

    wanted = {d.meta["seq"] for d in deliveries} | {d.meta["seq"] + 1 for d in deliveries}
    deadline = time.monotonic() + 5
    found: dict[int, dict] = {}
    while time.monotonic() < deadline:
        found = {e["seq"]: e for e in read_records(redis, "bench:events") if e["seq"] in wanted}
        if len(found) == len(wanted):
            break
        time.sleep(0.05)
    for d in deliveries:
        record = found.get(d.meta["seq"])
        if not (record and record["commit"]):
            raise RuntimeError(f"no commit time from the probe for event {d.meta['seq']}")
        d.start = record["commit"]
        d.meta["push"] = ms(record["push"] - record["commit"])
        after = found.get(d.meta["seq"] + 1)
        if after and after["type"] == "run.updated":
            d.meta["next_push"] = ms(after["push"] - record["push"])


async def measure(stack, people, redis, budget: float) -> list[Row]:
    from channels.layers import get_channel_layer

    count, messages = size(40, 200), size(10, 20)
    deadline = time.monotonic() + budget
    desk2, desk2_url = start_daphne(stack, "desk-web-2", DESK_APP)
    floor2, floor2_url = start_daphne(stack, "floor-web-2", FLOOR_APP)
    desk_socks: list[Socket] = []
    floor_socks: list[Socket] = []
    watchers: list[Socket] = []
    desk: list[Delivery] = []
    floor: list[Delivery] = []
    opened: dict[str, float] = {}
    try:
        await asyncio.to_thread(wait_daphne, desk2_url, DESK_APP)
        await asyncio.to_thread(wait_daphne, floor2_url, FLOOR_APP)
        ws = [url.replace("http", "ws") for url in (stack.desk_url, desk2_url)]
        started = time.perf_counter()
        cookies = reviewer_cookies(people)
        desk_socks = await open_all(
            count, ws, cookies=cookies, origin=stack.desk_url, path=desk_page_socket()
        )
        opened["desk"] = time.perf_counter() - started
        watchers = await open_all(1, ws, cookies=cookies, origin=stack.desk_url)
        started = time.perf_counter()
        floor_socks = await open_all(
            count, [url.replace("http", "ws") for url in (stack.floor_url, floor2_url)]
        )
        opened["floor"] = time.perf_counter() - started
        layer = get_channel_layer()
        async with httpx.AsyncClient(base_url=stack.desk_url, timeout=30) as http:
            # Warm both: the worker's first run, each process's subscriptions, the layer's
            # connections here. The desk's warm event is the floor's payload, size for size.
            warm = await desk_one(http, desk_socks, people, watchers[0])
            payload = warm.meta["message"] or {"type": "approval.created", "data": {}}
            for i in range(3):
                await floor_one(layer, floor_socks, -1 - i, payload)
            for i in range(messages):
                if time.monotonic() > deadline:
                    break
                desk.append(await desk_one(http, desk_socks, people, watchers[0]))
                floor.append(await floor_one(layer, floor_socks, i, payload))
        await asyncio.sleep(0.5)  # a second copy of a push would arrive by now
        for deliveries, socks in ((desk, desk_socks), (floor, floor_socks)):
            for d in deliveries:
                d.duplicates = copies(socks, d.match)
    finally:
        await close_all(desk_socks + watchers)
        await close_all(floor_socks)
        stack.stop_one(desk2)
        stack.stop_one(floor2)
    time.sleep(0.3)  # let the probes flush
    commits(redis, desk)

    def spreads(deliveries: list[Delivery]) -> dict[str, dict]:
        parts: dict[str, list[float]] = {}
        for d in deliveries:
            for name, value in d.spread().items():
                parts.setdefault(name, []).append(value)
        return {name: summary(values) for name, values in parts.items()}

    desk_missed, floor_missed = [d.missed for d in desk], [d.missed for d in floor]
    extra = {
        "fanout": {
            "sockets": count,
            "processes": 2,
            "reviewers": list(REVIEWERS),
            "approvals": len(desk),
            "miss_after_s": MISS_AFTER,
            "desk": spreads(desk),
            "floor": spreads(floor),
            "submit_to_last": summary(
                [ms(max(a for a in d.arrivals if a) - d.submit) for d in desk if d.on_time()]
            ),
            "next_push": summary([d.meta["next_push"] for d in desk if "next_push" in d.meta]),
            # The worker's commit → its push of the approval (the rest of 8a is the fan-out).
            "commit_to_push": summary([d.meta["push"] for d in desk if "push" in d.meta]),
            "missed": {"desk": sum(desk_missed), "floor": sum(floor_missed)},
            "deliveries": {"desk": count * len(desk), "floor": count * len(floor)},
            "duplicates": {
                "desk": sum(d.duplicates for d in desk),
                "floor": sum(d.duplicates for d in floor),
            },
            "opened_s": {name: round(seconds, 2) for name, seconds in opened.items()},
        }
    }
    return [
        Row(
            "8a",
            f"fan-out to {count} sockets: commit → the last one (approval.created, 2 ASGI processes)",
            "ms",
            [d.to_last() for d in desk],
            floor=f"bare group_send → the last of {count} bare consumers (2 processes)",
            floor_samples=[d.to_last() for d in floor],
            max_ratio=1.5,
            target="p50 ≤ 1.5x floor",
            extra=extra,
        ),
        Row(
            "8b",
            f"fan-out to {count} sockets: missed pushes per approval",
            "count",
            desk_missed,
            floor="the same with bare group_send",
            floor_samples=floor_missed,
            max_value=0,
            target=f"0 (all pushed within {MISS_AFTER:.0f} s)",
        ),
    ]
