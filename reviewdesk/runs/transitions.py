"""Run state changes that other apps make too: requeue, fail, and their nudges.

This is the run *data* layer: it imports no approval code, so `approvals` can
call it (a decision requeues its run; an expiry may fail it) while the run
orchestration (`services`, `execution`, `sweeper`) sits above `approvals`.
Tasks are sent by name for the same reason: importing `runs.tasks` here would
pull the worker code, and with it `approvals`, back in underneath.

Every function expects the caller to hold the run's row lock in the current
transaction.
"""

from __future__ import annotations

import logging
import uuid

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from reviewdesk.audit.services import audit_record
from reviewdesk.celery import app as celery_app
from reviewdesk.events.services import event_emit
from reviewdesk.runs.access import run_audience
from reviewdesk.runs.models import Attempt, AttemptStatus, Run, RunStatus, SideEffect
from reviewdesk.runs.representation import run_data
from reviewdesk.runs.retention import checkpoints_prune
from reviewdesk.runs.rows import run_update

logger = logging.getLogger(__name__)

RUN_TASK = "runs.run"
RESUME_TASK = "runs.resume"


def enqueue_on_commit(task_name: str, run: Run, *, countdown: float | None = None) -> None:
    """Send the task once the transaction commits; remember its id so cancel can revoke it."""
    task_id_assign(run)
    Run.objects.filter(pk=run.pk).update(task_id=run.task_id)
    send_on_commit(task_name, run, countdown=countdown)


def task_id_assign(run: Run) -> None:
    """A fresh id for the task about to be sent, on the instance only: the caller saves it
    with the row ("task_id" in its update_fields; one UPDATE fewer than enqueue_on_commit)
    and calls `send_on_commit` where the send belongs among its commit hooks."""
    run.task_id = str(uuid.uuid4())


def send_on_commit(task_name: str, run: Run, *, countdown: float | None = None) -> None:
    """Send the task `task_id_assign` named on `run` once the transaction commits."""
    run_id, task_id = str(run.pk), run.task_id
    # robust: a broker outage must not turn a committed run into a 500; the
    # sweeper re-enqueues queued runs whose message never arrived.
    transaction.on_commit(
        lambda: celery_app.send_task(task_name, args=[run_id], task_id=task_id, countdown=countdown),
        robust=True,
    )


def revoke_on_commit(task_id: str) -> None:
    """Best effort: a queued task is dropped; a running one is stopped by fencing."""
    transaction.on_commit(lambda: celery_app.control.revoke(task_id), robust=True)


def run_emit_updated(run: Run) -> None:
    event_emit(type="run.updated", data=run_data(run), run_id=run.pk, audience=run_audience(run))


def run_requeue(run: Run) -> None:
    """A run waiting for input has its answer: queue it and send `resume` on commit."""
    run.status = RunStatus.QUEUED
    run.revision += 1
    task_id_assign(run)
    run_update(run, ["status", "revision", "task_id", "updated_at"])
    run_emit_updated(run)
    send_on_commit(RESUME_TASK, run)  # after the event: its push leaves first, as before


def run_external_waiting_update(run: Run) -> None:
    """An external run waits for input while any of its calls is pending, and is its framework's
    (`running`) once none is: after a decision, an expiry or a new submit. Its framework, not a
    task, goes on; the run's event tells the desk. An ended run stays as it ended."""
    if run.status in (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED):
        return
    # Read through the reverse relation: this data layer imports no approval code.
    waiting = run.approvals.filter(status="pending").exists()
    status = RunStatus.INPUT_REQUIRED if waiting else RunStatus.RUNNING
    if run.status == status:
        return
    run.status = status
    run.revision += 1
    run_update(run, ["status", "revision", "updated_at"])
    run_emit_updated(run)


def run_retry_budgets_renew(run: Run) -> None:
    """A new go at the run (a retry by hand, or a follow-up's next turn): the automatic-retry
    budget (`run.retries`, which the caller saves) and the tools' retry budgets, a call's and
    the run's (DESK_TOOL_RETRIES, DESK_TOOL_RETRIES_PER_RUN), start afresh. The ledger rows keep
    every failure in `retries`, the call's history the run page shows; the budgets count those
    since `retries_at_retry` (runs.ledger)."""
    run.retries = 0
    SideEffect.objects.filter(run=run).update(retries_at_retry=F("retries"))


def run_mark_failed(run: Run, error: str, *, kind: str, save: bool = True) -> None:
    """End the run as failed, with its running attempt. The caller cancels its open approvals.

    With `save=False` the caller saves the row (and bumps its revision) itself. A caller may
    have bumped the cancel epoch to fence out a worker: it is saved with the rest.
    """
    run.status, run.error, run.error_kind = RunStatus.FAILED, error, kind
    run.lease_expires_at = None
    checkpoints_prune(run)
    Attempt.objects.filter(run=run, status=AttemptStatus.RUNNING).update(
        status=AttemptStatus.FAILED, ended_at=timezone.now(), error=error
    )
    audit_record(
        actor=None,
        action="run.failed",
        subject_type="run",
        subject_id=run.id,
        data={"error": error, "kind": kind},
    )
    if save:
        run.revision += 1
        run.save(
            update_fields=[
                "status",
                "error",
                "error_kind",
                "lease_expires_at",
                "cancel_epoch",
                "revision",
                "updated_at",
            ]
        )
        run_emit_updated(run)


def record_stale_write(attempt: Attempt, detail: str) -> None:
    """A fenced-out worker tried to write: refuse it (the caller already did) and say so."""
    logger.warning("rejected a stale write from attempt %s: %s", attempt.pk, detail)
    audit_record(
        actor=None,
        action="attempt.stale_write_rejected",
        subject_type="run",
        subject_id=attempt.run_id,
        data={"attempt": attempt.number, "lease_epoch": attempt.lease_epoch, "detail": detail},
    )
