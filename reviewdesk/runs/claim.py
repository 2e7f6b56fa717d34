"""Claiming a run: the lease taken by one worker's attempt, and giving up on a run whose
workers keep dying.

`run_claim` is where duplicates of a task (redelivery, the sweeper, a double decision) are
turned away: it takes the lease only from a run that is queued and due, or running under an
expired lease, and bumps the lease epoch that fences every write after it (host.py).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from reviewdesk.approvals.lifecycle.raising import approvals_cancel_open
from reviewdesk.lib.db import atomic_appends_last
from reviewdesk.runs.models import Attempt, AttemptStatus, ErrorKind, Run, RunStatus
from reviewdesk.runs.rows import attempt_insert, run_claim_due
from reviewdesk.runs.transitions import run_emit_updated, run_mark_failed


def run_claim(*, run_id: Any, worker: str) -> Attempt | None:
    """Take the run's lease if it is queued (and due), or running under an expired lease.

    None when another worker owns it, it is not due yet, or it has ended:
    duplicates of the task (redelivery, the sweeper, a double decision) return
    here harmlessly. A run whose workers keep dying is failed, not retried forever.
    """
    now = timezone.now()
    with atomic_appends_last():
        run = run_claim_due(run_id, now)
        if run is not None:  # the usual case, in one statement
            return _attempt_for(run, worker)
        run = Run.objects.select_for_update().filter(pk=run_id).first()
        if run is None or run.is_external:
            # An external run is its framework's: no worker takes it, whatever its status says.
            return None
        expired = run.status == RunStatus.RUNNING and run.lease_expires_at and run.lease_expires_at < now
        due = run.status == RunStatus.QUEUED and (run.next_attempt_at is None or run.next_attempt_at <= now)
        if not (due or expired):
            return None
        if expired:
            Attempt.objects.filter(run=run, status=AttemptStatus.RUNNING).update(
                status=AttemptStatus.LOST, ended_at=now
            )
            if gave_up(run, "the worker died {lost} times in a row running this run"):
                return None
        run.status = RunStatus.RUNNING
        run.lease_epoch += 1
        run.lease_expires_at = now + timedelta(seconds=settings.DESK_LEASE_SECONDS)
        run.next_attempt_at = None
        run.revision += 1
        run.save(
            update_fields=[
                "status",
                "lease_epoch",
                "lease_expires_at",
                "next_attempt_at",
                "revision",
                "updated_at",
            ]
        )
        attempt = _attempt_for(run, worker)
    return attempt


def _attempt_for(run: Run, worker: str) -> Attempt:
    """The claimed run's new attempt, and its `running` event, in the claim's transaction."""
    assert run.lease_expires_at is not None, "the claim sets the lease"
    attempt = attempt_insert(
        Attempt(
            run=run,
            # Every claim bumps the epoch and creates one attempt, in one transaction: the
            # epoch is the attempt's number (no count of the run's attempts).
            number=run.lease_epoch,
            lease_epoch=run.lease_epoch,
            worker=worker,
            expires_at=run.lease_expires_at,
        )
    )
    run_emit_updated(run)
    attempt.run = run
    return attempt


def gave_up(run: Run, why: str) -> bool:
    """Fail the run when its latest DESK_MAX_LOST_ATTEMPTS attempts were all lost; `why` says
    how they were lost, with `{lost}` for their number."""
    lost = _lost_in_a_row(run)
    if lost < settings.DESK_MAX_LOST_ATTEMPTS:
        return False
    run_fail(run, "gave up: " + why.format(lost=lost), kind=ErrorKind.INTERNAL)
    return True


def _lost_in_a_row(run: Run) -> int:
    """The run's latest attempts that died, in a row, since it was last retried by hand: a
    retry starts the count afresh (one death after it is one, not the give-up's N + 1)."""
    lost = 0
    since_retry = run.attempts.filter(number__gt=run.retried_at_epoch)
    for status in since_retry.order_by("-number").values_list("status", flat=True):
        if status != AttemptStatus.LOST:
            break
        lost += 1
    return lost


def run_fail(run: Run, error: str, *, kind: str, save: bool = True) -> None:
    """End the run as failed and cancel its open requests. Caller holds the run lock."""
    approvals_cancel_open(run=run, why="the run failed")
    run_mark_failed(run, error, kind=kind, save=save)
