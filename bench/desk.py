"""#7 the desk page, the approvals API and the socket snapshot, at a few and at many pending.

Pending approvals are written straight into the database (runs waiting for input, one
approval each); the three views are then timed over HTTP and the socket as alice, and
their queries counted in this process with the same code (CaptureQueriesContext).
Target: at many pending, within 1.5x the time at a few, with the same number of queries.
Their sizes in bytes (the page's body, the snapshot's frame) are rows too, reported beside
the size at a few: the page and the snapshot are one window of the queue, whatever is pending.
Many is 10,000 in both modes: the rows go in with bulk inserts, so BENCH=short stays short.
7g and 7h time the page and the snapshot again with a quarter of the pending calls routed to
a group of alice's (her queue's second tier, read in parts: approvals.reads.queue.in_queue_order),
at a few and at many alike.

The two sizes are timed in the order many, few, many (half of the samples at many before the
few, half after): a shift in the machine or the database that lasts minutes falls on both
sizes alike, where timing all of the few and then all of the many put it between them (whole
halves have been seen to move by a third on PostgreSQL with the same code). Between
them the extra rows are deleted (with VACUUM ANALYZE on PostgreSQL) and written again.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta

import httpx

from bench.common import Row, Socket, ms, size

FEW = 10
MANY = 10_000


def add_pending(count: int, people) -> list:
    """Write `count` runs waiting on one approval each; their ids."""
    from django.utils import timezone

    from agents.canonical import sha256_hex
    from agents.state import SCHEMA_VERSION
    from reviewdesk.approvals.models import ApprovalRequest
    from reviewdesk.runs.models import Checkpoint, Run, RunStatus

    arguments = {"to": "ada@example.com", "subject": "Refund", "body": "It is on its way."}
    expires = timezone.now() + timedelta(days=1)
    run_ids = []
    for start in range(0, count, 1000):
        batch = min(1000, count - start)
        runs = Run.objects.bulk_create(
            Run(
                agent="demo",
                input="bench",
                model={"provider": "scripted", "script": []},
                approval_ttl_seconds=86400,
                submitted_by=people.carol,
                status=RunStatus.INPUT_REQUIRED,
            )
            for _ in range(batch)
        )
        checkpoints = Checkpoint.objects.bulk_create(
            Checkpoint(run=run, number=1, schema_version=SCHEMA_VERSION, message_count=2, snapshot={})
            for run in runs
        )
        ApprovalRequest.objects.bulk_create(
            ApprovalRequest(
                run=run,
                checkpoint=checkpoint,
                tool_call_id="call_0",
                tool="send_email",
                arguments=arguments,
                arguments_sha256=sha256_hex(arguments),
                expires_at=expires,
            )
            for run, checkpoint in zip(runs, checkpoints, strict=True)
        )
        run_ids.extend(run.pk for run in runs)
    analyze(ApprovalRequest, Run, Checkpoint)
    return run_ids


GROUP = "bench-billing"  # alice's, for 7g and 7h


def route_a_quarter(to_group: bool) -> None:
    """Every fourth pending call assigned to GROUP (`to_group`), or every one open again."""
    from reviewdesk.approvals.models import ApprovalRequest, ApprovalStatus

    pending = ApprovalRequest.objects.filter(status=ApprovalStatus.PENDING)
    pending.update(assignees=[])
    if to_group:
        ids = list(pending.order_by("id").values_list("id", flat=True))
        for start in range(0, len(ids), 4000):
            ApprovalRequest.objects.filter(pk__in=ids[start : start + 4000 : 4]).update(
                assignees=[f"group:{GROUP}"]
            )
    analyze(ApprovalRequest)


def remove_pending(run_ids: list) -> None:
    """Delete what add_pending wrote (the runs `run_ids`, their checkpoints and approvals, in
    a few statements), so the pending are the few again; on PostgreSQL, VACUUM ANALYZE the
    tables, as autovacuum would after such a delete, so the planner's statistics are the few's.
    Not the same tables as before the many (PostgreSQL's visibility map is set, SQLite keeps the
    freed pages), and the many's own halves read tables with the dead rows route_a_quarter's
    updates leave: both favour the few, so they weigh against the target, never for it."""
    from django.db import connection

    from reviewdesk.approvals.models import ApprovalRequest
    from reviewdesk.runs.models import Checkpoint, Run

    for start in range(0, len(run_ids), 1000):
        batch = run_ids[start : start + 1000]
        for model, field in ((ApprovalRequest, "run_id"), (Checkpoint, "run_id"), (Run, "pk")):
            model.objects.filter(**{f"{field}__in": batch})._raw_delete(connection.alias)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            for model in (ApprovalRequest, Checkpoint, Run):
                cursor.execute(f'VACUUM ANALYZE "{model._meta.db_table}"')


def pending_count() -> int:
    from reviewdesk.approvals.models import ApprovalRequest, ApprovalStatus

    return ApprovalRequest.objects.filter(status=ApprovalStatus.PENDING).count()


def expire_leftovers() -> int:
    """Expire what earlier figures left pending (#4 pauses 81 runs and never decides them), so
    that "a few" is FEW and not every approval the run has raised. Returns how many."""
    from reviewdesk.approvals.models import ApprovalRequest, ApprovalStatus

    return ApprovalRequest.objects.filter(status=ApprovalStatus.PENDING).update(status=ApprovalStatus.EXPIRED)


def analyze(*models) -> None:
    """On PostgreSQL, statistics for the tables just loaded, as autovacuum gathers them soon after
    a load like this: without them the planner guesses from an empty table's and sorts every
    pending row. SQLite keeps no statistics unless asked, so there is nothing to match."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        for model in models:
            cursor.execute(f'ANALYZE "{model._meta.db_table}"')


def count_queries(people) -> dict[str, int]:
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from reviewdesk.desk import consumers

    client = Client()
    client.force_login(people.alice)
    counts = {}
    with CaptureQueriesContext(connection) as page:
        assert client.get("/").status_code == 200
    counts["desk page"] = len(page)
    with CaptureQueriesContext(connection) as api:
        response = client.get(
            "/api/v1/approvals?status=pending", HTTP_AUTHORIZATION=f"Bearer {people.alice_token}"
        )
        assert response.status_code == 200
    counts["approvals API"] = len(api)
    with CaptureQueriesContext(connection) as snapshot:
        consumers._snapshot.func(people.alice)
    counts["socket snapshot"] = len(snapshot)
    return counts


async def time_both(stack, people, repeat: int) -> tuple[dict[str, dict], dict[str, dict], dict, dict]:
    """The views timed and their queries counted with every call open, then with a quarter
    routed to GROUP; every call is left open."""
    route_a_quarter(False)
    times, queries = await time_views(stack, people, repeat), count_queries(people)
    route_a_quarter(True)
    routed_times, routed_queries = await time_views(stack, people, repeat), count_queries(people)
    route_a_quarter(False)
    return times, queries, routed_times, routed_queries


def joined(first: tuple[dict, ...], second: tuple[dict, ...]) -> tuple[dict, ...]:
    """Two of time_both's results at one size as one: the samples of both, the second's sizes,
    and each view's query count when both counted the same, else -1 (never equal to a count, so
    the target's "same queries" fails rather than pick one)."""
    out = []
    for a, b in zip(first, second, strict=True):
        if all(isinstance(v, int) for v in a.values()):  # query counts
            out.append({name: a[name] if a[name] == b[name] else -1 for name in a})
        else:  # timings: samples joined, the rest (bytes, approvals shown) from the second
            out.append({name: {**b[name], "samples": a[name]["samples"] + b[name]["samples"]} for name in a})
    return tuple(out)


async def time_views(stack, people, repeat: int) -> dict[str, dict]:
    out: dict[str, dict] = {
        "desk page": {},
        "approvals API": {},
        "approvals API, 10 a page": {},
        "socket snapshot": {},
    }
    async with httpx.AsyncClient(base_url=stack.desk_url, timeout=120) as http:
        for name, url, headers in (
            ("desk page", "/", {"Cookie": people.alice_cookie}),
            (
                "approvals API",
                "/api/v1/approvals?status=pending",
                {"Authorization": f"Bearer {people.alice_token}"},
            ),
            (
                "approvals API, 10 a page",
                f"/api/v1/approvals?status=pending&limit={FEW}",
                {"Authorization": f"Bearer {people.alice_token}"},
            ),
        ):
            samples, sizes = [], []
            for i in range(repeat + 1):
                start = time.perf_counter()
                response = await http.get(url, headers=headers)
                elapsed = time.perf_counter() - start
                assert response.status_code == 200, (url, response.status_code)
                if i:
                    samples.append(ms(elapsed))
                sizes.append(len(response.content))
            out[name] = {"samples": samples, "bytes": sizes[-1]}
    samples, sizes, shown = [], [], 0
    for i in range(repeat + 1):
        start = time.perf_counter()
        sock = await Socket().open(
            stack.desk_url.replace("http", "ws") + "/ws/desk/", cookie=people.alice_cookie, raw=True
        )
        _, frame = await sock.wait_for(lambda text: json.loads(text).get("type") == "snapshot", 120)
        elapsed = time.perf_counter() - start
        await sock.close()
        if i:
            samples.append(ms(elapsed))
        sizes.append(len(frame.encode()))
        shown = len(json.loads(frame)["data"]["approvals"])
    out["socket snapshot"] = {"samples": samples, "bytes": sizes[-1], "approvals": shown}
    return out


async def measure(stack, people, redis, budget: float) -> list[Row]:
    many = MANY
    # Nine in a short run: the median of three swung from 0.8x to 2.7x on the same code (the
    # snapshot: 1.04x over fifteen). A view takes tens of ms; the inserts take the time.
    repeat = size(9, 15)
    from django.contrib.auth.models import Group

    Group.objects.get_or_create(name=GROUP)[0].user_set.add(people.alice)
    left_over = expire_leftovers()
    add_pending(FEW, people)

    added: list = []

    async def at(pending: int, samples: int) -> tuple[dict, dict, dict, dict]:
        """The views timed `samples` times each with `pending` pending, reached from the other size."""
        if pending == many and not added:
            added.extend(add_pending(many - FEW, people))
        elif pending == FEW and added:
            remove_pending(added)
            added.clear()
        assert pending_count() == pending, (pending_count(), pending)
        return await time_both(stack, people, samples)

    # Many, few, many: the few's samples sit between the many's halves (module docstring).
    first = await at(many, repeat - repeat // 2)
    few_times, few_queries, few_routed, few_routed_queries = await at(FEW, repeat)
    second = await at(many, repeat // 2)
    many_times, many_queries, many_routed, many_routed_queries = joined(first, second)
    rows = []
    for number, name, routed in (
        ("7a", "desk page", False),
        ("7b", "approvals API", False),
        ("7c", "socket snapshot", False),
        ("7g", "desk page", True),
        ("7h", "socket snapshot", True),
    ):
        few_at, few_counted = (few_routed, few_routed_queries) if routed else (few_times, few_queries)
        many_at, many_counted = (many_routed, many_routed_queries) if routed else (many_times, many_queries)
        same = few_counted[name] == many_counted[name]
        rows.append(
            Row(
                number,
                f"{name} at {many:,} pending" + (", a quarter to her group" if routed else ""),
                "ms",
                many_at[name]["samples"],
                floor=f"the same at {FEW} pending",
                floor_samples=few_at[name]["samples"],
                max_ratio=1.5,
                condition=same,
                target="≤ 1.5x and same queries",
                extra={
                    "queries": {FEW: few_counted[name], many: many_counted[name]},
                    "size": {FEW: few_at[name]["bytes"], many: many_at[name]["bytes"]},
                    "pending": {FEW: FEW, many: many},
                    "expired first, left pending by earlier figures": left_over,
                },
            )
        )
    # The API's page is FEW rows at FEW pending and its default 50 at many: 7f asks for FEW at
    # both, so what is left is what the pending rows themselves cost.
    name = "approvals API, 10 a page"
    rows.append(
        Row(
            "7f",
            f"approvals API at {many:,} pending, {FEW} a page",
            "ms",
            many_times[name]["samples"],
            floor=f"the same at {FEW} pending",
            floor_samples=few_times[name]["samples"],
            target="reported: 7b without its page growing",
            extra={"size": {FEW: few_times[name]["bytes"], many: many_times[name]["bytes"]}},
        )
    )
    for number, name in (("7d", "desk page"), ("7e", "socket snapshot")):
        rows.append(
            Row(
                number,
                f"{name} size at {many:,} pending",
                "B",
                [many_times[name]["bytes"]],
                floor=f"the same at {FEW} pending",
                floor_samples=[few_times[name]["bytes"]],
                target="reported: one page whatever is pending",
                extra={
                    "approvals shown": {
                        FEW: few_times[name].get("approvals"),
                        many: many_times[name].get("approvals"),
                    }
                },
            )
        )
    return rows
