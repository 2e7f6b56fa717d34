"""Fault injection on real processes: workers kill -9 themselves at step boundaries.

Web, worker and beat run with DESK_FAULT_INJECTION; each worker process dies
with probability DESK_FAULT_KILL_RATE at every named point (after the model
call, during a checkpoint save, after the ledger's pending, after the effect,
after confirmed). The test approves over HTTP like a reviewer, and then counts:
side effects per call (emails in the outbox, refund rows, lines the shell
command appended to a file — a real external effect with no idempotency key),
runs that never settled, kills, and recovery time.

`make test` runs a short version (DESK_CHAOS_RUNS, default 8); `make chaos`
a long one. An external effect interrupted between `pending` and `confirmed`
becomes `unknown` and a reconciliation item: the test, as the human, looks at
the world (outbox, the command's file) and marks it done or signs a re-run.

The counters (tests/e2e/counting.py) first prove they see a duplicate of each
kind planted in a copy of the world, before the test trusts their zero.
"""

from __future__ import annotations

import json
import os
import statistics
import time
import uuid
from decimal import ROUND_DOWN, Decimal
from pathlib import Path

import pytest
from django.conf import settings

from reviewdesk.accounts.services import token_create
from reviewdesk.demo.models import DemoRefund
from reviewdesk.lib.faults import POINTS
from reviewdesk.runs.models import Attempt
from reviewdesk.runs.transitions import RUN_TASK
from tests.e2e.conftest import http, outbox_for, start_stack, wait_until
from tests.e2e.counting import Effects, World, duplicated, effects_per_run, plant_duplicates

pytestmark = [pytest.mark.e2e, pytest.mark.chaos, pytest.mark.django_db(transaction=True)]

RUNS = int(os.environ.get("DESK_CHAOS_RUNS", "8"))
KILL_RATE = os.environ.get("DESK_CHAOS_KILL_RATE", "0.2")
SETTLE_TIMEOUT = float(os.environ.get("DESK_CHAOS_TIMEOUT", "240"))
ENDED = ("succeeded", "failed", "cancelled")

# The demo world knows three orders and refuses a refund beyond what is left of an order's
# total. Were the runs to refund more than the order holds between them, the cap would refuse
# most refunds, and a duplicate refund too: the duplicate counter could never fire. So each run
# refunds a share small enough that every run's refund, and a duplicate of every one, fit
# under the cap. (A refund this small needs no approval; the email and the command do.)
ORDER, ORDER_TOTAL = "A-1001", Decimal("250.00")
REFUND = (ORDER_TOTAL / (2 * RUNS)).quantize(Decimal("0.01"), rounding=ROUND_DOWN)
assert REFUND > 0, f"{RUNS} runs cannot share order {ORDER} ({ORDER_TOTAL})"


def script(n: int) -> list[dict]:
    return [
        {
            "tool_calls": [
                {"name": "lookup_customer", "arguments": {"email": "ada@example.com"}},
                {
                    "name": "send_email",
                    "arguments": {"to": "ada@example.com", "subject": f"run {n}", "body": "hi"},
                },
                {"name": "refund_payment", "arguments": {"order_id": ORDER, "amount": float(REFUND)}},
            ]
        },
        {"tool_calls": [{"name": "execute", "arguments": {"command": "echo $$ >> effects.log"}}]},
        {"content": f"run {n} done"},
    ]


def chaos_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        "DESK_FAULT_INJECTION": "1",
        "DESK_FAULT_KILL_AT": ",".join(POINTS),
        "DESK_FAULT_KILL_RATE": KILL_RATE,
        "DESK_FAULT_LOG": str(tmp_path / "kills.jsonl"),
        "DESK_LEASE_SECONDS": "2",
        "DESK_SWEEP_SECONDS": "1",
        "DESK_REQUEUE_AFTER_SECONDS": "3",
        "DESK_MAX_LOST_ATTEMPTS": "1000",
        # A re-run is signed only after the stale attempt's hard time limit: keep the wait short.
        "DESK_TASK_TIME_LIMIT": "40",
        "DESK_CELERY_QUEUE": f"chaos-{tmp_path.name}",
        **extra,
    }


def answer_the_desk(stack, *tokens) -> None:
    """Act as the reviewers: approve tool calls (execute needs two, so each reviewer votes in
    turn); reconcile interrupted effects by looking at the world."""
    for token in tokens:
        _answer_as(stack, token)


def _answer_as(stack, token) -> None:
    _, pending = http("GET", f"{stack.url}/api/v1/approvals?status=pending", token=token)
    for item in pending["results"]:
        body = {"verdict": "approve", "checkpoint_id": item["checkpoint_id"]}
        if item["kind"] == "reconcile":
            evidence = _evidence(item)
            body["verdict"] = "confirm" if evidence else "rerun"
            body["external_ref"] = evidence
        http("POST", f"{stack.url}/api/v1/approvals/{item['id']}/decision", token=token, body=body)


def _evidence(item: dict) -> str:
    """Where an interrupted effect shows up in the world, if it happened."""
    if item["tool"] == "send_email":
        return "outbox" if outbox_for(item["run"]) else ""
    if item["tool"] == "execute":
        log = Path(settings.DESK_RUNS_DIR) / item["run"] / "effects.log"
        return "effects.log" if log.exists() and log.read_text().strip() else ""
    raise AssertionError(f"unexpected reconciliation for {item['tool']}")


def test_killing_workers_at_every_step_boundary_never_duplicates_or_loses_a_run(
    personas, redis_server, tmp_path, report_timing
):
    _, carol = token_create(user=personas.carol, scopes=["submit"])
    _, alice = token_create(user=personas.alice, scopes=["review"])
    _, bob = token_create(user=personas.bob, scopes=["review"])
    stack = start_stack(tmp_path, env_extra=chaos_env(tmp_path), beat=True)
    started = time.monotonic()
    try:
        run_ids = []
        for n in range(RUNS):
            status, run = http(
                "POST",
                stack.url + "/api/v1/runs",
                token=carol,
                body={
                    "agent": "demo",
                    "input": f"chaos {n}",
                    "model": {"provider": "scripted", "script": script(n)},
                },
            )
            assert status == 201, run
            run_ids.append(run["id"])

        def all_settled():
            answer_the_desk(stack, alice, bob)
            runs = [http("GET", f"{stack.url}/api/v1/runs/{rid}", token=carol)[1] for rid in run_ids]
            return runs if all(r["status"] in ENDED for r in runs) else None

        try:
            runs = wait_until(all_settled, timeout=SETTLE_TIMEOUT, what="every run to settle", interval=0.3)
        except AssertionError:
            runs = [http("GET", f"{stack.url}/api/v1/runs/{rid}", token=carol)[1] for rid in run_ids]
            stuck = [(r["id"], r["status"]) for r in runs if r["status"] not in ENDED]
            raise AssertionError(f"runs lost or stuck: {stuck}\n{stack.logs()}") from None
    finally:
        stack.stop()
    elapsed = time.monotonic() - started

    for run in runs:
        assert run["status"] == "succeeded", (run["id"], run["status"], run["error"])
        assert {e["status"] for e in run["side_effects"]} == {"confirmed"}, run["id"]
        refund = next(e for e in run["side_effects"] if e["tool"] == "refund_payment")
        assert refund["result"] and "error" not in refund["result"], refund["result"]

    world = World(
        outbox=Path(settings.EMAIL_FILE_PATH),
        refund_keys=tuple(DemoRefund.objects.values_list("idempotency_key", flat=True)),
        runs_dir=Path(settings.DESK_RUNS_DIR),
    )
    counts = effects_per_run(world, run_ids)
    # Before trusting a zero: a duplicate of each kind, planted in a copy of this world, is seen.
    planted = effects_per_run(plant_duplicates(world, run_ids[0], tmp_path / "planted"), run_ids)
    assert duplicated(planted) == {run_ids[0]: Effects(emails=2, refunds=2, commands=2)}, planted
    assert {r: c for r, c in planted.items() if r != run_ids[0]} == {
        r: c for r, c in counts.items() if r != run_ids[0]
    }
    duplicates = duplicated(counts)
    assert duplicates == {}
    assert set(counts.values()) == {Effects(emails=1, refunds=1, commands=1)}, counts

    kills = (
        [json.loads(line) for line in (tmp_path / "kills.jsonl").read_text().splitlines()]
        if (tmp_path / "kills.jsonl").exists()
        else []
    )
    assert kills, "no worker was killed: the test proved nothing (raise DESK_CHAOS_KILL_RATE)"
    recoveries = _recovery_seconds(kills)
    reconciliations = [a for r in runs for a in r["approvals"] if a["kind"] == "reconcile"]
    reconciled = len(reconciliations)
    confirmed = sum(a["decision"]["verdict"] == "confirm" for a in reconciliations if a["decision"])
    by_point = {p: sum(k["point"] == p for k in kills) for p in POINTS}
    report_timing(
        f"[chaos] {len(runs)} runs, {len(kills)} kills ({', '.join(f'{p} {n}' for p, n in by_point.items() if n)}); "
        f"duplicates {len(duplicates)}, runs lost 0, all {len(runs)} succeeded; "
        f"{reconciled} effects interrupted mid-call went to a human ({confirmed} marked done, "
        f"{reconciled - confirmed} re-run); "
        f"recovery after a kill: median {statistics.median(recoveries):.1f} s, max {max(recoveries):.1f} s "
        f"(lease 2 s, sweep 1 s); {elapsed:.0f} s in all"
        if recoveries
        else f"[chaos] {len(runs)} runs, {len(kills)} kills, duplicates {len(duplicates)}, runs lost 0"
    )


def _recovery_seconds(kills: list[dict]) -> list[float]:
    """From each kill to the next attempt on the run the killed process held."""
    recoveries = []
    attempts = list(Attempt.objects.order_by("started_at").values("run_id", "worker", "started_at", "number"))
    for kill in kills:
        pid = f":{kill['pid']}:"
        held = [a for a in attempts if pid in a["worker"] and a["started_at"].timestamp() <= kill["t"]]
        if not held:
            continue
        victim = held[-1]
        after = [a for a in attempts if a["run_id"] == victim["run_id"] and a["number"] > victim["number"]]
        if after:
            recoveries.append(after[0]["started_at"].timestamp() - kill["t"])
    return recoveries


def test_runs_queued_when_redis_is_flushed_all_complete(personas, redis_server, redis_client, tmp_path):
    """The broker loses every message: the database still knows, and the sweeper re-sends."""
    _, carol = token_create(user=personas.carol, scopes=["submit"])
    env = {
        "DESK_SWEEP_SECONDS": "1",
        "DESK_REQUEUE_AFTER_SECONDS": "2",
        # Unique per run: Redis outlives a test run, and an aborted one leaves its messages.
        "DESK_CELERY_QUEUE": f"flush-{tmp_path.name}-{uuid.uuid4().hex[:8]}",
    }
    stack = start_stack(tmp_path, env_extra=env, beat=True)
    try:
        stack.processes["worker"].kill()
        stack.processes["beat"].kill()
        run_ids = []
        for n in range(5):
            status, run = http(
                "POST",
                stack.url + "/api/v1/runs",
                token=carol,
                body={
                    "agent": "demo",
                    "input": f"flush {n}",
                    "model": {"provider": "scripted", "script": [{"content": "ok"}]},
                },
            )
            assert status == 201
            run_ids.append(run["id"])
        # Beat may have queued a periodic task of its own before it was killed: count the runs'.
        queued = [
            json.loads(m)["headers"]["task"] for m in redis_client.lrange(env["DESK_CELERY_QUEUE"], 0, -1)
        ]
        assert queued.count(RUN_TASK) == 5, queued
        redis_client.flushdb()
        assert redis_client.llen(env["DESK_CELERY_QUEUE"]) == 0
        ready_before = stack.processes["worker"].log_text().count(" ready.")
        stack.processes["worker"].start()
        stack.processes["beat"].start()
        wait_until(
            lambda: stack.processes["worker"].log_text().count(" ready.") > ready_before,
            timeout=30,
            what="worker",
        )

        def done():
            runs = [http("GET", f"{stack.url}/api/v1/runs/{rid}", token=carol)[1] for rid in run_ids]
            return runs if all(r["status"] == "succeeded" for r in runs) else None

        runs = wait_until(done, timeout=60, what="every queued run to complete after the flush", interval=0.3)
    finally:
        stack.stop()
    assert [r["output"] for r in runs] == ["ok"] * 5
