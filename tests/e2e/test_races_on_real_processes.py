"""Races through real processes: a duplicated Celery delivery, and a worker frozen past its lease."""

from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path

import pytest
from django.conf import settings

from reviewdesk.accounts.services import token_create
from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.approvals.models import ApprovalRequest
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


def test_the_same_resume_delivered_twice_at_once_by_celery_runs_each_effect_once(
    live_stack, personas, task_queue
):
    """One resume message delivered twice (one task id, as a broker redelivery leaves it) to a
    worker with two processes. Both deliveries enter the task: the worker logs the task id
    received twice and succeeded twice. They race: the first `succeeded` is logged while the
    run is still running the other delivery's slow command, so that delivery was turned away
    by the lease, not by a finished run. One attempt, one email, one command."""
    from reviewdesk.runs.tasks import resume

    _, carol = token_create(user=personas.carol, scopes=["submit"])
    run = submit(
        live_stack,
        carol,
        [
            {
                "tool_calls": [
                    {
                        "name": "send_email",
                        "arguments": {"to": "ada@example.com", "subject": "race", "body": "once"},
                    },
                    {"name": "execute", "arguments": {"command": "sleep 2; echo ran >> effects.log"}},
                ]
            },
            {"content": "done"},
        ],
    )
    wait_for_run(live_stack, carol, run["id"], "input_required")
    # Decided in this process: the resume each decision enqueues goes to this process's own
    # queue (task_queue), which no worker reads, so the two deliveries below are the only ones.
    for approval in ApprovalRequest.objects.filter(run_id=run["id"], status="pending"):
        # execute needs two reviewers (the demo's quorum); send_email one.
        for reviewer in (personas.alice, personas.bob)[: approval.required_approvals]:
            approval_decide(
                approval_id=approval.id,
                reviewer=reviewer,
                verdict="approve",
                checkpoint_id=str(approval.checkpoint_id),
            )
    task_id = str(uuid.uuid4())
    for _ in range(2):
        resume.apply_async(
            args=[run["id"]], task_id=task_id, queue=f"{settings.CELERY_TASK_DEFAULT_QUEUE}-live"
        )

    worker_log = live_stack.processes["worker"].log_text
    received, succeeded = f"runs.resume[{task_id}] received", f"runs.resume[{task_id}] succeeded"
    wait_until(lambda: worker_log().count(succeeded) >= 1, timeout=30, what="a delivery to finish")
    attempts = list(Attempt.objects.filter(run_id=run["id"], worker__contains=task_id))
    assert [a.status for a in attempts] == ["running"], "the first delivery to finish did not race the other"
    assert get_run(live_stack, carol, run["id"])["status"] == "running"

    final = wait_for_run(live_stack, carol, run["id"], "succeeded")
    wait_until(lambda: worker_log().count(succeeded) == 2, timeout=30, what="both deliveries to finish")
    assert worker_log().count(received) == 2
    assert Attempt.objects.filter(run_id=run["id"], worker__contains=task_id).count() == 1
    assert len(outbox_for(run["id"])) == 1
    log = Path(settings.DESK_RUNS_DIR) / run["id"] / "effects.log"
    assert log.read_text().splitlines() == ["ran"]
    assert sorted((e["tool"], e["status"]) for e in final["side_effects"]) == [
        ("execute", "confirmed"),
        ("send_email", "confirmed"),
    ]


def test_a_worker_frozen_past_its_lease_comes_back_to_find_its_writes_rejected(
    personas, redis_server, tmp_path
):
    """SIGSTOP the worker process while its slow command runs (the ledger says pending); the
    sweeper gives the run to another process, which finds the effect pending, marks it
    unknown and raises a reconciliation. SIGCONT: the frozen worker's confirm no longer
    matches (the row stays unknown, no result), its next fenced write is rejected and
    audited, and the reviewer's reconciliation is what the ledger records in the end.
    (The `sh -c` child is not stopped, so the command itself may finish during the freeze.)"""
    _, carol = token_create(user=personas.carol, scopes=["submit"])
    _, alice = token_create(user=personas.alice, scopes=["review"])
    _, bob = token_create(user=personas.bob, scopes=["review"])
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
        for reviewer in (alice, bob):  # the demo's execute needs two reviewers
            status, _ = http(
                "POST",
                f"{stack.url}/api/v1/approvals/{approval['id']}/decision",
                token=reviewer,
                body={"verdict": "approve", "checkpoint_id": approval["checkpoint_id"]},
            )
            assert status == 201
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
        # The frozen worker confirms before its next fenced write, so by now it has tried.
        effect = SideEffect.objects.get(run_id=run["id"])
        assert (effect.status, effect.result) == ("unknown", None)
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
    effect.refresh_from_db()
    assert (effect.status, effect.external_ref) == ("confirmed", "effects.log")
    assert effect.result == {"reconciled": True, "external_ref": "effects.log", "by": "alice"}
