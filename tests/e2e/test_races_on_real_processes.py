"""Races through real processes: a duplicated Celery delivery, and a worker frozen past its lease."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from django.conf import settings

from reviewdesk.accounts.services import token_create
from reviewdesk.audit.models import AuditEvent
from reviewdesk.runs.models import Attempt, SideEffect
from tests.e2e.conftest import get_run, http, outbox_for, start_stack, wait_for_run, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def submit(stack, token, script) -> dict:
    status, run = http(
        "POST",
        stack.url + "/api/v1/runs",
        token=token,
        body={"agent": "demo", "input": "race", "model": {"provider": "scripted", "script": script}},
    )
    assert status == 201, run
    return run


def waiting_approval(stack, token, run_id) -> dict:
    def pending():
        run = get_run(stack, token, run_id)
        items = [a for a in run["approvals"] if a["status"] == "pending"]
        return items[0] if run["status"] == "input_required" and items else None

    return wait_until(pending, timeout=30, what="a pending approval", interval=0.1)


def test_the_same_resume_delivered_twice_at_once_by_celery_sends_one_email(live_stack, personas):
    from reviewdesk.runs.tasks import resume
    from tests.conftest import SEND_EMAIL_SCRIPT

    _, carol = token_create(user=personas.carol, scopes=["submit"])
    _, alice = token_create(user=personas.alice, scopes=["review"])
    run = submit(live_stack, carol, SEND_EMAIL_SCRIPT)
    approval = waiting_approval(live_stack, carol, run["id"])
    status, _ = http(
        "POST",
        f"{live_stack.url}/api/v1/approvals/{approval['id']}/decision",
        token=alice,
        body={"verdict": "approve", "checkpoint_id": approval["checkpoint_id"]},
    )
    assert status == 201
    # Two more deliveries of the same task, straight onto the worker's queue (concurrency 2).
    queue = f"{settings.CELERY_TASK_DEFAULT_QUEUE}-live"
    for _ in range(2):
        resume.apply_async(args=[run["id"]], queue=queue)

    final = wait_for_run(live_stack, carol, run["id"], "succeeded")
    time.sleep(1)  # let the duplicates finish being turned away
    assert len(outbox_for(run["id"])) == 1
    assert [e["status"] for e in final["side_effects"]] == ["confirmed"]


def test_a_worker_frozen_past_its_lease_comes_back_to_find_its_writes_rejected(
    personas, redis_server, tmp_path
):
    """SIGSTOP the worker process while its slow command runs (the ledger says pending); the
    sweeper gives the run to another process, which finds the effect pending and raises a
    reconciliation. SIGCONT: the frozen worker's confirm no longer matches (the row is
    unknown now), and its fenced writes (checkpoint, outcome) are rejected and audited.
    (The `sh -c` child is not stopped, so the command itself may finish during the freeze.)"""
    _, carol = token_create(user=personas.carol, scopes=["submit"])
    _, alice = token_create(user=personas.alice, scopes=["review"])
    env = {
        "DESK_LEASE_SECONDS": "2",
        "DESK_SWEEP_SECONDS": "1",
        "DESK_REQUEUE_AFTER_SECONDS": "2",
        "DESK_CELERY_QUEUE": f"frozen-{tmp_path.name}",
    }
    script = [
        {"tool_calls": [{"name": "execute", "arguments": {"command": "sleep 2; echo done >> effects.log"}}]},
        {"content": "finished"},
    ]
    stack = start_stack(tmp_path, env_extra=env, beat=True)
    try:
        run = submit(stack, carol, script)
        approval = waiting_approval(stack, carol, run["id"])
        http(
            "POST",
            f"{stack.url}/api/v1/approvals/{approval['id']}/decision",
            token=alice,
            body={"verdict": "approve", "checkpoint_id": approval["checkpoint_id"]},
        )
        # The attempt executing the command: its worker name carries the child's pid.
        executing = wait_until(
            lambda: Attempt.objects.filter(run_id=run["id"], number=2, status="running").first(),
            timeout=20,
            what="the attempt running the command",
            interval=0.05,
        )
        pid = int(executing.worker.split(":")[1])
        wait_until(
            lambda: SideEffect.objects.filter(run_id=run["id"], status="pending").exists(),
            timeout=30,
            what="the ledger to say pending",
            interval=0.02,
        )
        os.kill(pid, signal.SIGSTOP)
        try:
            # Past the lease, another process takes the run: the effect is pending, so unknown.
            wait_until(
                lambda: Attempt.objects.filter(run_id=run["id"], number__gt=2).exists(),
                timeout=30,
                what="another worker to re-claim the run",
                interval=0.1,
            )
            reconcile = waiting_approval(stack, carol, run["id"])
            assert reconcile["kind"] == "reconcile"
        finally:
            os.kill(pid, signal.SIGCONT)

        wait_until(
            lambda: AuditEvent.objects.filter(
                action="attempt.stale_write_rejected", subject_id=run["id"]
            ).exists(),
            timeout=30,
            what="the frozen worker's write to be rejected",
            interval=0.1,
        )
        log = Path(settings.DESK_RUNS_DIR) / run["id"] / "effects.log"
        wait_until(log.exists, timeout=10, what="the frozen command to finish")
        assert Attempt.objects.get(pk=executing.pk).status == "lost"
        # The human sees the command did run, and says so; the run finishes without re-running it.
        status, _ = http(
            "POST",
            f"{stack.url}/api/v1/approvals/{reconcile['id']}/decision",
            token=alice,
            body={
                "verdict": "confirm",
                "external_ref": "effects.log",
                "checkpoint_id": reconcile["checkpoint_id"],
            },
        )
        assert status == 201
        final = wait_for_run(stack, carol, run["id"])
    finally:
        stack.stop()
    assert final["status"] == "succeeded", final["error"]
    assert log.read_text().splitlines() == ["done"]
