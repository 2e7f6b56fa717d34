"""#9 the cycle with a long history in the database, beside the same cycle before it.

The cycle is #3's (bench.cycle.one_cycle: carol submits through the API, alice's socket gets
`approval.created`, alice decides through the API, her socket gets `run.updated` succeeded).
It runs first on the database as it stands (empty when this figure runs alone; otherwise
whatever the earlier figures left, which the row says), then `seed_history` inserts finished
runs with the rows a real cycle leaves (messages, two attempts, two checkpoints, a decided
approval with its decision, a ledger row, desk events, and audit rows that continue the
chain), and the same cycle runs again.

A reviewer's pages (desk page, runs page, runs API, a run's page and API, as alice) show a
page of runs, so their baseline is a full page of history (200 runs), not the empty database:
a page of 50 rows beside a page of 5 would measure the page, not the history. The audit page
(9h, as the admin) is timed the same way: each side after beat's anchor task has run
(`audit_anchor`, as beat does every minute, and a sweep, `audit_sweep`, whose record the page
reads) and then SINCE_ANCHOR more cycles, so that both walk the same few rows since the newest
anchor, with the record of a full check (beat's `audit.check`, run once before the history) to
show. What 9h isolates is the history, whose
audit rows the page must not walk whole; what a load costs beside it grows with the rows written
since the newest anchor (docs/audit.md).

History: 100,000 runs, or 10,000 with BENCH=short (the row says which), spread over several
submitters and agents; some name a reviewer whose approval was routed, handed over or
escalated to others. The seeding writes rows in bulk (executemany on SQLite, COPY on
PostgreSQL), stops at its share of the budget, and prints how long it took.
Target: each figure within 1.2x of its baseline.
"""

from __future__ import annotations

import time

import httpx

from bench.common import SHORT, Row, Socket, ms, size
from bench.history_seed import HISTORY, PAGE_HISTORY, seed_history


async def cycles(
    http: httpx.AsyncClient, sock: Socket, people, count: int, deadline: float
) -> dict[str, list]:
    from bench.cycle import one_cycle

    out: dict[str, list] = {"whole": [], "push": [], "decide": [], "runs": []}
    for _ in range(count):
        if time.monotonic() > deadline:
            break
        c = await one_cycle(http, sock, people, 30)
        t = c["t"]
        out["whole"].append(ms(t["done"] - t["submit"]))
        out["push"].append(ms(t["created"] - t["submit"]))
        out["decide"].append(ms(t["done"] - t["decide"]))
        out["runs"].append(c["run"])
    return out


VIEWS = ("desk page", "runs page", "runs API", "run page", "run API", "audit page")


async def time_views(http: httpx.AsyncClient, people, run_id: str, repeat: int) -> dict[str, list[float]]:
    cookie = {"Cookie": people.alice_cookie}
    admin = {"Cookie": people.admin_cookie}
    bearer = {"Authorization": f"Bearer {people.alice_token}"}
    urls = {
        "desk page": ("/", cookie),
        "runs page": ("/runs/", cookie),
        "runs API": ("/api/v1/runs", bearer),
        "run page": (f"/runs/{run_id}/", cookie),
        "run API": (f"/api/v1/runs/{run_id}", bearer),
        "audit page": ("/audit/", admin),
    }
    out: dict[str, list[float]] = {}
    for name in VIEWS:
        url, headers = urls[name]
        samples = []
        for i in range(repeat + 1):
            start = time.perf_counter()
            response = await http.get(url, headers=headers)
            elapsed = time.perf_counter() - start
            assert response.status_code == 200, (url, response.status_code)
            if i:  # the first warms the view's caches
                samples.append(ms(elapsed))
        out[name] = samples
    return out


# Cycles run between beat's anchor and the pages' timing (9h): the same rows since the anchor.
SINCE_ANCHOR = 3


async def after_an_anchor(http: httpx.AsyncClient, sock: Socket, people) -> None:
    """Beat's anchor task and a sweep (so the page reads a recent sweep's record, as it does
    while beat runs), then SINCE_ANCHOR cycles: the audit rows the page walks on a load."""
    from asgiref.sync import sync_to_async

    from bench.cycle import one_cycle
    from reviewdesk.audit.sweep import audit_sweep
    from reviewdesk.audit.verification import audit_anchor

    assert (await sync_to_async(audit_anchor)()).intact
    assert (await sync_to_async(audit_sweep)()).intact
    for _ in range(SINCE_ANCHOR):
        await one_cycle(http, sock, people, 30)


async def measure(stack, people, redis, budget: float) -> list[Row]:
    from asgiref.sync import sync_to_async

    from bench.cycle import one_cycle
    from reviewdesk.audit.verification import audit_check_record
    from reviewdesk.runs.models import Run

    count = HISTORY
    per_size = size(8, 30)
    repeat = size(5, 20)
    started = time.monotonic()
    sock = await Socket().open(stack.desk_url.replace("http", "ws") + "/ws/desk/", cookie=people.alice_cookie)
    await sock.wait_for(lambda m: m.get("type") == "snapshot", 30)
    async with httpx.AsyncClient(base_url=stack.desk_url, timeout=120) as http:
        for _ in range(3):  # warm: imports, connections, first-use caches
            await one_cycle(http, sock, people, 30)
        already = await sync_to_async(Run.objects.count)()
        before = await cycles(http, sock, people, per_size, started + budget * 0.2)
        # The pages show a page of runs: their baseline is a full page of history, not the few
        # runs so far (a page of 50 rows beside a page of 10 would measure the page, not the history).
        first = await sync_to_async(seed_history)(PAGE_HISTORY, people)
        await sync_to_async(audit_check_record)()
        await after_an_anchor(http, sock, people)
        before_views = await time_views(http, people, before["runs"][-1], repeat)
        seeded = await sync_to_async(seed_history)(count - PAGE_HISTORY, people, budget=budget * 0.6)
        total = first["runs"] + seeded["runs"]
        print(
            f"  #9 seeded {total:,} finished runs ({sum(seeded['rows'].values()) + sum(first['rows'].values()):,} "
            f"rows besides) in {first['seconds'] + seeded['seconds']:.1f} s"
            + f" + {seeded['analyze_seconds']:.1f} s ANALYZE / WAL checkpoint",
            flush=True,
        )
        after = await cycles(http, sock, people, per_size, time.monotonic() + budget * 0.3)
        await after_an_anchor(http, sock, people)
        after_views = await time_views(http, people, after["runs"][-1], repeat)
    await sock.close()
    label = f"{total:,} finished runs" + (" (BENCH=short)" if SHORT else "")
    base = (
        "the same on an empty database" if already <= 4 else f"the same before the history ({already:,} runs)"
    )
    page_base = f"the same with {PAGE_HISTORY} finished runs (a full page)"
    extra = {
        "history": {"runs": total, "seconds": first["seconds"] + seeded["seconds"], "rows": seeded["rows"]},
        "runs_before": already,
        "analyze_seconds": seeded["analyze_seconds"],
    }

    def row(id_: str, figure: str, after_samples, floor: str, floor_samples) -> Row:
        return Row(
            id_,
            f"{figure} with {label}",
            "ms",
            after_samples,
            floor=floor,
            floor_samples=floor_samples,
            max_ratio=1.2,
            target="p50 ≤ 1.2x",
        )

    cycle = [
        ("9", "whole cycle", "whole"),
        ("9a", "submit → approval.created", "push"),
        ("9b", "decision POST → run succeeded", "decide"),
    ]
    rows = [row(id_, figure, after[key], base, before[key]) for id_, figure, key in cycle]
    rows[0].extra = extra  # the history itself: once, on the whole cycle's row
    rows += [
        row(
            f"9{letter}",
            f"{name} ({'admin' if name == 'audit page' else 'reviewer'})",
            after_views[name],
            page_base,
            before_views[name],
        )
        for letter, name in zip("cdefgh", VIEWS, strict=True)
    ]
    return rows
