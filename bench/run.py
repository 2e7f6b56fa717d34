"""`make bench` / `python -m bench.run`: start the stack, measure, write, print.

BENCH=short runs each figure for a few seconds (CI proves the harness works); anything
else is the full run. BENCH_ONLY=1,5 picks figures by number. Writes
var/bench/results.json and var/bench/results.png, and prints the table.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Any

from bench import stack as stack_mod
from bench.common import SHORT, Row

# (figure numbers, module, time budget in seconds short / full)
FIGURES = [
    ({"1", "2", "3"}, "bench.cycle", (20, 120)),
    ({"6"}, "bench.throughput", (30, 180)),
    ({"5"}, "bench.storage", (30, 60)),
    ({"4"}, "bench.pause_resume", (20, 120)),
    ({"7"}, "bench.desk", (60, 600)),
    ({"8"}, "bench.fanout", (45, 300)),
    ({"10"}, "bench.reach", (40, 240)),
    ({"11"}, "bench.provenance", (10, 60)),
    ({"12"}, "bench.slack_click", (15, 120)),
    # Last: its history stays in the database, and the other figures measure before it.
    ({"9"}, "bench.history", (120, 900)),
]
# Figures the issue asks for that this harness does not measure yet (none today).
NOT_DONE: dict[str, str] = {}


@dataclass
class People:
    alice: Any
    carol: Any
    alice_token: str
    carol_token: str
    alice_cookie: str
    admin_cookie: str  # the audit page (#9h)


def people() -> People:
    from django.contrib.auth import get_user_model
    from django.test import Client

    from reviewdesk.accounts.demo import demo_users_seed
    from reviewdesk.accounts.services import token_create

    demo_users_seed()
    users = get_user_model().objects
    alice, carol = users.get(username="alice"), users.get(username="carol")
    client, admin = Client(), Client()
    client.force_login(alice)
    admin.force_login(users.get(username="admin"))
    return People(
        alice=alice,
        carol=carol,
        alice_token=token_create(user=alice, scopes=["review"], name="bench")[1],
        carol_token=token_create(user=carol, scopes=["submit"], name="bench")[1],
        alice_cookie=f"sessionid={client.cookies['sessionid'].value}",
        admin_cookie=f"sessionid={admin.cookies['sessionid'].value}",
    )


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    if unit == "B":
        return f"{value:,.0f} B"
    if unit == "count":
        return f"{value:,.0f}"
    if unit == "/s":
        return f"{value:,.1f}/s"
    return f"{value:,.1f} ms" if value < 1000 else f"{value / 1000:,.2f} s"


def table(rows: list[dict[str, Any]]) -> str:
    head = ("#", "figure", "median", "p99", "n", "floor", "floor median", "ratio", "target", "met")
    lines = [head]
    for row in rows:
        value, floor = row["value"], row["floor_value"]
        met = {True: "yes", False: "NO", None: "—"}[row["met"]]
        lines.append(
            (
                row["id"],
                row["figure"],
                fmt(value["median"], row["unit"]),
                fmt(value["p99"], row["unit"]),
                str(value["n"]),
                row["floor"] or "—",
                fmt(floor["median"], row["unit"]),
                f"{row['ratio']:.2f}x" if row["ratio"] is not None else "—",
                row["target"] or "—",
                met,
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    out = [" | ".join(cell.ljust(widths[i]) for i, cell in enumerate(line)) for line in lines]
    out.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(out)


def breakdown_text(rows: list[dict[str, Any]]) -> str:
    lines = []
    for row in rows:
        extra = row.get("extra") or {}
        if "breakdown" in extra:
            lines.append(f"\n#3 the cycle, broken down ({extra['cycles']} cycles; median / p99 / n):")
            for name, s in extra["breakdown"].items():
                unit = "" if name.endswith(("statements", "transactions")) else " ms"
                if s["median"] is not None:
                    lines.append(f"  {name:<48} {s['median']:8.1f}{unit} / {s['p99']:8.1f}{unit} / {s['n']}")
            lines.append("  per cycle: " + ", ".join(f"{k} {v:.1f}" for k, v in extra["per_cycle"].items()))
        if "queries" in extra and "pending" in extra:
            # The figure at many pending beside the same at a few: time, bytes, queries.
            (few, many) = extra["pending"]
            side = [
                f"{n:,} pending {fmt(v['median'], 'ms')}, {extra['size'][n]:,} B, {extra['queries'][n]} queries"
                for n, v in ((few, row["floor_value"]), (many, row["value"]))
            ]
            lines.append(f"#{row['id']} {row['figure'].split(' at ')[0]}: " + " | ".join(side))
        if "fanout" in extra:
            f = extra["fanout"]

            def spread(parts: dict[str, Any]) -> str:
                return ", ".join(f"{name} {fmt(s['median'], 'ms')}" for name, s in parts.items())

            lines.append(
                f"\n#8 fan-out: {f['sockets']} sockets ({'/'.join(f['reviewers'])}) over {f['processes']} daphne "
                f"processes, {f['approvals']} approvals; p50 per message:"
            )
            lines.append(f"  desk, commit → socket: {spread(f['desk'])}")
            lines.append(
                f"  desk, submit → last socket: {fmt(f['submit_to_last']['median'], 'ms')}; the run's "
                f"input_required pushed {fmt(f['next_push']['median'], 'ms')} after the approval, fanning out behind it"
            )
            lines.append(f"  floor, group_send → socket: {spread(f['floor'])}")
            lines.append(
                f"  missed the push (> {f['miss_after_s']:.0f} s or never): desk {f['missed']['desk']} of "
                f"{f['deliveries']['desk']}, floor {f['missed']['floor']} of {f['deliveries']['floor']}; "
                f"duplicates: desk {f['duplicates']['desk']}, floor {f['duplicates']['floor']}; sockets opened in "
                + ", ".join(f"{k} {v} s" for k, v in f["opened_s"].items())
            )
        if extra.get("cpu_ms_per_cycle"):
            cpu = extra["cpu_ms_per_cycle"]
            lines.append(
                f"\n#{row['id']} CPU per cycle ({extra['finished']} cycles, {extra['web_processes']} web "
                "process(es); ms of CPU time, idle = the CPUs' unused time): "
                + ", ".join(f"{who} {ms:.1f}" for who, ms in cpu.items())
            )
            for role, lock in (extra.get("writers_lock_ms_per_cycle") or {}).items():
                lines.append(
                    f"  writers' lock, {role}: taken {lock['taken']} times a cycle, waited {lock['wait_ms']} ms, "
                    f"held {lock['held_ms']} ms (of which committing {lock['commit_ms']} ms)"
                )
        if "reach" in extra:
            from bench.reach import reach_text

            lines.append(reach_text(extra["reach"]))
        if "provenance" in extra:
            from bench.provenance import provenance_text

            lines.append(provenance_text(extra["provenance"]))
        if "slack_click" in extra:
            from bench.slack_click import slack_click_text

            lines.append(slack_click_text(extra["slack_click"]))
        if "pause_resume" in extra:
            lines.append(pause_resume_text(extra["pause_resume"]))
        if "growth_200_vs_100" in extra:
            lines.append(
                f"#5 stored at 100 messages {extra['100']['stored']:,} B ({extra['100']['ratio']:.2f}x raw), at 200 "
                f"{extra['200']['stored']:,} B ({extra['200']['ratio']:.2f}x raw); growth 200/100 = "
                f"{extra['growth_200_vs_100']:.2f}"
            )
    return "\n".join(lines)


def pause_resume_text(p: dict[str, Any]) -> str:
    """#4 in parts: pause and resume apart, at each size, both sides; growth; LangGraph's bytes."""
    lines = ["\n#4 pause / resume, p50 (the desk's resume = load + commit):"]
    for side in ("desk", "langgraph"):
        for n in p["sizes"]:
            parts = p[side].get(n) or p[side].get(str(n)) or {}
            if parts:
                lines.append(
                    f"  {side:<9} at {n:>3} messages: "
                    + ", ".join(f"{name} {fmt(s['median'], 'ms')}" for name, s in parts.items())
                )
    if p["langgraph_missing"]:
        lines.append(f"  LangGraph: {p['langgraph_missing']}")
    growth = ", ".join(f"{side} {g:.2f}x" for side, g in p["growth"].items() if g)
    lines.append(f"  growth {p['sizes'][-1]}/{p['sizes'][0]} messages: {growth}")
    if stored := p.get("langgraph_storage"):
        lines.append(
            f"  LangGraph's saver for #5's {stored['messages']}-message conversation: {stored['stored']:,} B "
            f"({stored['ratio']:.1f}x raw {stored['raw']:,} B; checkpoints {stored['checkpoints']:,}, "
            f"blobs {stored['blobs']:,}, writes {stored['writes']:,})"
        )
    return "\n".join(lines)


def main() -> int:
    env = stack_mod.configure()
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"  # this driver only: one thread, its own loop
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection

    from reviewdesk.approvals.signing import ensure_keys

    only = set(filter(None, os.environ.get("BENCH_ONLY", "").split(",")))
    mode = "short" if SHORT else "full"
    stack = stack_mod.Stack()
    results: list[dict[str, Any]] = []
    failures: list[str] = []
    started = time.time()
    try:
        stack_mod.start_redis_if_embedded(stack, env)
        call_command("migrate", "--noinput", verbosity=0)
        ensure_keys()
        who = people()
        from bench.probe import redis_client

        redis = redis_client()
        for key in redis.scan_iter("bench:*"):
            redis.delete(key)
        stack_mod.start_processes(stack, env)
        for numbers, module_name, budgets in FIGURES:
            if only and not (numbers & only):
                continue
            budget = budgets[0] if SHORT else budgets[1]
            print(f"… figure {'/'.join(sorted(numbers))} ({module_name}, ≤ {budget}s)", flush=True)
            module = __import__(module_name, fromlist=["measure"])
            try:
                rows: list[Row] = asyncio.run(
                    asyncio.wait_for(module.measure(stack, who, redis, budget), budget * 2)
                )
                results.extend(row.as_dict() for row in rows)
            except Exception:
                failures.append(module_name)
                traceback.print_exc()
    finally:
        stack.stop()
    # "10a" after "9": by the figure's number, then its letter.
    results.sort(key=lambda r: (int("".join(c for c in r["id"] if c.isdigit())), r["id"]))
    out = {
        "mode": mode,
        "database": connection.vendor,
        "redis": "embedded" if settings.EMBEDDED_REDIS_SOCKET else "REDIS_URL",
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "seconds": round(time.time() - started, 1),
        "rows": results,
        "not_done": NOT_DONE,
        "failed": failures,
    }
    stack_mod.OUT.mkdir(parents=True, exist_ok=True)
    (stack_mod.OUT / "results.json").write_text(json.dumps(out, indent=2, default=str))
    plot_path = None
    try:
        from bench.plot import plot

        plot_path = plot(results, stack_mod.OUT / "results.png", title=f"{mode}, {connection.vendor}")
    except ImportError as exc:
        print(f"no plot: {exc} (pip install -r requirements-bench.txt)", file=sys.stderr)
    print(
        f"\nReview Desk bench ({mode}; {connection.vendor} + {out['redis']} Redis; {os.cpu_count()} CPUs; {out['seconds']} s)\n"
    )
    print(table(results))
    print(breakdown_text(results))
    if NOT_DONE:
        print("\nnot measured: " + "; ".join(f"#{k} {v}" for k, v in NOT_DONE.items()))
    print(f"\nwrote {stack_mod.OUT / 'results.json'}" + (f" and {plot_path}" if plot_path else ""))
    if failures:
        print(f"\nfigures that failed to run: {', '.join(failures)} (see var/bench/*.log)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
