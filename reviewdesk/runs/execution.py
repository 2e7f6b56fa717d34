"""Executing a run: claim the lease, advance the turn loop, record how it ended.

The `run` and `resume` tasks call `run_execute`. Duplicates of a task
(redelivery, the sweeper, a double decision) are turned away by `run_claim` (claim.py);
everything a worker writes afterwards is fenced on its lease (see `host.py`),
and `run_finish` is fenced the same way.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import InterfaceError, OperationalError, connection
from django.utils import timezone

from agents.loop import Failed, FailureKind, Finished, Limits, Outcome, Retrying, Waiting, advance
from agents.providers import AssistantTurn, ModelProvider, provider_for
from agents.registry import UnknownAgent, get_agent
from reviewdesk.agent_modules.loading import not_loaded_here
from reviewdesk.approvals.lifecycle.raising import approvals_cancel_open
from reviewdesk.approvals.reads.decisions import calls_decided_meanwhile, refused_decision_of
from reviewdesk.audit.services import audit_record
from reviewdesk.lib import faults
from reviewdesk.lib.db import atomic_appends_last
from reviewdesk.runs.claim import gave_up, run_claim, run_fail
from reviewdesk.runs.host import DatabaseHost, LeaseLost, StepWriteFailed
from reviewdesk.runs.leases import LeaseKeeper
from reviewdesk.runs.models import Attempt, AttemptStatus, Run, RunStatus
from reviewdesk.runs.retention import checkpoints_prune
from reviewdesk.runs.rows import attempt_end, run_locked, run_update
from reviewdesk.runs.transitions import (
    RESUME_TASK,
    record_stale_write,
    run_emit_updated,
    send_on_commit,
    task_id_assign,
)

logger = logging.getLogger(__name__)

# A run whose agent this process does not load waits this long before its next try, doubled
# for each such try in a row, up to the second figure (seconds).
_NOT_LOADED_BACKOFF_MAX = 300.0


@dataclass(frozen=True)
class NotLoadedHere:
    """This process does not load the run's agent (its DESK_AGENTS lacks the agent's module: a
    deploy that adds or moves a module reaches the workers one by one). The run is released,
    queued again after `delay` seconds for any worker to take; never failed."""

    error: str
    delay: float


class _LeaseCheckedProvider:
    """The model provider, not called once the lease is lost (a cancelled or fenced-out worker
    stops before paying for another model call), with the `after_model_call` fault point."""

    def __init__(self, provider: ModelProvider, host: DatabaseHost) -> None:
        self.provider, self.host = provider, host

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AssistantTurn:
        # It takes time: what came before is written first, or the lease checked (write_unsaved).
        self.host.write_unsaved(before_model_call=True)
        turn = self.provider.complete(messages, tools)
        faults.point("after_model_call")
        return turn


def run_execute(*, run_id: Any, worker: str = "") -> Outcome | NotLoadedHere | None:
    """The body of the `run` and `resume` tasks: advance the run as far as it goes. Returns
    the outcome recorded, or None when none was: the run was not claimed, or this attempt
    lost it (a cancel, an expired lease) before its end was written. A run whose agent this
    process does not load is released for another worker (`NotLoadedHere`), untouched."""
    attempt = run_claim(run_id=run_id, worker=worker)
    if attempt is None:
        return None
    run = attempt.run
    host = DatabaseHost(run=run, attempt=attempt)
    try:
        get_agent(run.agent)
    except UnknownAgent:
        released = _not_loaded(run, attempt)
        return released if run_finish(attempt=attempt, outcome=released, host=host) else None
    try:
        with LeaseKeeper(attempt, cancel_epoch=run.cancel_epoch) as keeper:
            host.lease_lost = keeper.lost
            provider = provider_for(
                run.model or {},  # None only for an external run, which no worker claims
                openai_options={
                    "base_url": settings.OPENAI_BASE_URL,
                    "api_key": settings.OPENAI_API_KEY,
                    "timeout": settings.OPENAI_TIMEOUT_SECONDS,
                    "max_retries": settings.OPENAI_MAX_RETRIES,
                },
            )
            outcome = advance(
                agent=get_agent(run.agent),
                provider=_LeaseCheckedProvider(provider, host),
                host=host,
                limits=_limits(),
                sleep=lambda seconds: _wait_before_retry(host, seconds),
            )
    except LeaseLost as exc:
        record_stale_write(attempt, str(exc))
        return None
    except SoftTimeLimitExceeded:
        # Celery's warning before the hard kill: the task's time is up, the run is not broken.
        run_hand_over(attempt=attempt, host=host)
        return None
    except (OperationalError, InterfaceError) as exc:  # the database, not the run, failed
        outcome = _database_error(run, exc)
    except Exception as exc:  # a bug must end the run visibly, not leave it running
        outcome = _internal_error(run, exc)
    kept = host.kept()
    try:
        recorded = run_finish(attempt=attempt, outcome=outcome, host=host)
    except StepWriteFailed as failed:
        # Writing the steps the attempt kept failed, and the finish with them (its transaction
        # rolled back): end the run without them, as a step's own write failing did.
        outcome = _internal_error(run, failed.__cause__ or failed)
        recorded = run_finish(attempt=attempt, outcome=outcome)
    except Exception:
        # Any other error of the finish propagates: the run keeps its lease and the sweeper
        # takes it again. Its transaction took the kept steps with it: written on their own
        # first, the sweeper's attempt resumes from them (the model's last answer, say) rather
        # than asking the model again, which may answer otherwise.
        _write_kept_alone(host, kept)
        raise
    return outcome if recorded else None


def _not_loaded(run: Run, attempt: Attempt) -> NotLoadedHere:
    """The release of a run whose agent this process does not load: a warning naming the agent
    and this process's DESK_AGENTS, and a delay doubled for each such try in a row."""
    error = not_loaded_here(run.agent)
    earlier = (
        run.attempts.filter(number__lt=attempt.number).order_by("-number").values_list("error", flat=True)
    )
    in_a_row = 0
    for previous in earlier[:12]:  # 2**12 times the backoff is past any cap
        if previous != error:
            break
        in_a_row += 1
    delay = min(float(settings.DESK_RETRY_BACKOFF_SECONDS) * 2**in_a_row, _NOT_LOADED_BACKOFF_MAX)
    logger.warning(
        "run %s released: %s; queued again in %g s for a worker that loads it", run.id, error, delay
    )
    return NotLoadedHere(error=error, delay=delay)


def _internal_error(run: Run, exc: BaseException) -> Failed:
    incident = uuid.uuid4().hex[:12]  # the submitter sees only this id; the log has the details
    logger.exception("run %s failed with an internal error (incident %s): %r", run.id, incident, exc)
    return Failed(f"internal error (incident {incident})", kind=FailureKind.INTERNAL)


def _database_error(run: Run, exc: OperationalError | InterfaceError) -> Failed:
    """A lost connection, a lock that timed out, a deadlock: retried with backoff like a model
    server's hiccup (`_retry_automatically`). Every write was fenced and either committed or rolled
    back, and the ledger says what acted on the world: the next attempt does nothing twice. The
    error names the class only (the driver's message, which may name hosts, is in the log), so
    the same failure twice in a row still stops the retries."""
    logger.warning("run %s: a database error under the loop, retried as transient", run.id, exc_info=exc)
    # A connection the server dropped stays broken until closed (a task is no request, whose
    # end would close it): the finish then opens a new one. Not inside a caller's transaction
    # (a test's): that one is not ours to end.
    if not connection.in_atomic_block:
        connection.close_if_unusable_or_obsolete()
    return Failed(f"transient database error ({type(exc).__name__})", kind=FailureKind.TRANSIENT)


def _limits() -> Limits:
    return Limits(
        max_model_calls=settings.DESK_MAX_MODEL_CALLS,
        max_invalid_calls=settings.DESK_MAX_INVALID_CALLS,
        wait_notice_after=timedelta(seconds=settings.DESK_WAIT_NOTICE_SECONDS),
        tool_retries=settings.DESK_TOOL_RETRIES,
        tool_retries_per_run=settings.DESK_TOOL_RETRIES_PER_RUN,
        tool_retry_backoff=settings.DESK_TOOL_RETRY_BACKOFF_SECONDS,
        tool_retry_backoff_max=settings.DESK_TOOL_RETRY_BACKOFF_MAX_SECONDS,
        # Never wait in the task for anything near the lease: the heartbeat keeps it, but a
        # worker slot is held doing nothing. Longer waits release the run (`Retrying`).
        tool_retry_inline=min(settings.DESK_TOOL_RETRY_INLINE_SECONDS, settings.DESK_LEASE_SECONDS / 3),
    )


def _wait_before_retry(host: DatabaseHost, seconds: float) -> None:
    """A short backoff in the task, holding the lease (the heartbeat renews it). Wakes at
    once when the lease is lost (a cancel), which the next fenced write then reports."""
    faults.point("during_tool_retry")
    host.lease_lost.wait(seconds)
    host.check_lease()


def run_finish(
    *, attempt: Attempt, outcome: Outcome | NotLoadedHere, host: DatabaseHost | None = None
) -> bool:
    """Record the outcome, fenced on the attempt's lease and the cancel epoch it claimed under
    (`attempt.run` is the run as claimed); release the lease. The steps `host` kept since its
    last write are written first, in the same transaction (host.py): nothing of them when the
    attempt lost its lease. False when it lost it: nothing recorded, a stale write audited."""
    now = timezone.now()
    with atomic_appends_last():
        run = run_locked(attempt.run_id)
        if (
            run.status != RunStatus.RUNNING
            or run.lease_epoch != attempt.lease_epoch
            or run.cancel_epoch != attempt.run.cancel_epoch
        ):
            record_stale_write(attempt, f"finish as {type(outcome).__name__} after losing the lease")
            return False
        raised_now = _write_kept(host) if host is not None else set()
        attempt_status, attempt_error = AttemptStatus.RELEASED, ""
        if not isinstance(outcome, Failed | NotLoadedHere):  # a release here got past nothing
            _clear_error_overcome(run)
        if isinstance(outcome, Finished):
            run.status, run.output = RunStatus.SUCCEEDED, outcome.output
            approvals_cancel_open(run=run, why="the run finished")
            checkpoints_prune(run, last_number=_last_checkpoint(host, run))
            audit_record(actor=None, action="run.succeeded", subject_type="run", subject_id=run.id)
        elif isinstance(outcome, Failed):
            attempt_status, attempt_error = AttemptStatus.FAILED, outcome.error
            if outcome.kind == FailureKind.APPROVAL:
                audit_record(
                    actor=None,
                    action="decision.refused",
                    subject_type="run",
                    subject_id=run.id,
                    data={
                        "tool_call_id": outcome.call_id,
                        "reason": outcome.error,
                        **refused_decision_of(run_id=run.id, call_id=outcome.call_id),
                    },
                )
            if not _retry_automatically(run, attempt, outcome, now):
                run_fail(run, outcome.error, kind=outcome.kind, save=False)
        elif isinstance(outcome, Retrying):
            # A long backoff: free the worker and the lease; the resume is due after the delay.
            run.status = RunStatus.QUEUED
            run.next_attempt_at = now + timedelta(seconds=outcome.delay)
            attempt_error = f"{outcome.call_id} unavailable, next try in {outcome.delay:g} s: {outcome.error}"
            task_id_assign(run)  # saved below with the rest
            send_on_commit(RESUME_TASK, run, countdown=outcome.delay)
        elif isinstance(outcome, NotLoadedHere):
            # Nothing of the run was touched: queued again, for whichever worker loads its agent.
            run.status = RunStatus.QUEUED
            run.next_attempt_at = now + timedelta(seconds=outcome.delay)
            attempt_error = outcome.error
            task_id_assign(run)  # saved below with the rest
            send_on_commit(RESUME_TASK, run, countdown=outcome.delay)
        elif isinstance(outcome, Waiting):
            # A request raised just now, in this transaction, cannot have been answered yet.
            decided_meanwhile = not set(outcome.call_ids) <= raised_now and calls_decided_meanwhile(
                run=run, call_ids=outcome.call_ids
            )
            if decided_meanwhile:  # a decision landed while we held the lease
                run.status = RunStatus.QUEUED
                task_id_assign(run)  # saved below with the rest
                send_on_commit(RESUME_TASK, run)
            else:
                run.status = RunStatus.INPUT_REQUIRED
        run.lease_expires_at = None
        run.revision += 1
        run_update(
            run,
            [
                "status",
                "output",
                "error",
                "error_kind",
                "retries",
                "next_attempt_at",
                "lease_expires_at",
                "task_id",
                "revision",
                "updated_at",
            ],
        )
        attempt_end(attempt.pk, status=attempt_status, ended_at=now, error=attempt_error)
        run_emit_updated(run)
    return True


def _clear_error_overcome(run: Run) -> None:
    """A running run's error can only be the transient one its automatic retry was queued
    with (`_retry_automatically`; a failure or a cancel ends the run): an attempt that ended
    otherwise than failing got past it, and the run, its page and its run.updated no longer
    show it (a succeeded run with an error). run_finish saves both fields."""
    run.error, run.error_kind = None, ""


def run_hand_over(*, attempt: Attempt, host: DatabaseHost) -> bool:
    """The attempt ran out of time (the task's soft time limit): write the steps it kept and
    queue the run for a new attempt now, as the sweeper would after the hard kill, without
    waiting for the lease to expire. The attempt counts as lost, so a run whose every attempt
    runs out of time fails after DESK_MAX_LOST_ATTEMPTS like one whose workers die. Fenced
    as a step's write is; False when the attempt no longer owned the run."""
    now = timezone.now()
    with atomic_appends_last():
        try:
            host.fence()  # the run's row locked, this attempt's lease and cancel epochs checked
        except LeaseLost as exc:
            record_stale_write(attempt, f"hand-over at the time limit: {exc}")
            return False
        run = Run.objects.select_for_update().get(pk=attempt.run_id)
        _write_kept(host)
        Attempt.objects.filter(pk=attempt.pk).update(
            status=AttemptStatus.LOST, ended_at=now, error="the task's time limit ran out"
        )
        if gave_up(run, "the worker died or ran out of time {lost} times in a row"):
            return True
        run.status, run.lease_expires_at = RunStatus.QUEUED, None
        run.revision += 1
        task_id_assign(run)
        run.save(update_fields=["status", "lease_expires_at", "task_id", "revision", "updated_at"])
        run_emit_updated(run)
        send_on_commit(RESUME_TASK, run)
    return True


def _write_kept_alone(host: DatabaseHost, kept: list) -> None:
    """After a failed finish: the steps it rolled back, in a fenced transaction of their own.
    Best effort: the task is failing anyway, and with the database gone the sweeper's attempt
    does the work again from the last step written."""
    if not kept:
        return
    host.keep_again(kept)
    try:
        host.write_unsaved()
    except Exception:
        logger.exception("run %s: the steps kept before its failed finish were not written", host.run_id)


def _write_kept(host: DatabaseHost) -> set[str]:
    """The host's kept steps written in the finish's transaction (its lock held, its check done)."""
    try:
        return host.write_unsaved_fenced()
    except Exception as exc:
        raise StepWriteFailed(str(exc)) from exc


def _retry_automatically(run: Run, attempt: Attempt, outcome: Failed, now: datetime) -> bool:
    """Queue a transient failure again with exponential backoff, within the retry budget.

    The same error twice in a row stops automatic retries: it is not transient after all.
    """
    if outcome.kind != FailureKind.TRANSIENT or run.retries >= settings.DESK_AUTO_RETRIES:
        return False
    if _failed_before_with(run, attempt, outcome.error):
        return False
    delay = settings.DESK_RETRY_BACKOFF_SECONDS * 2**run.retries
    run.retries += 1
    run.status = RunStatus.QUEUED
    run.error, run.error_kind = outcome.error, outcome.kind
    run.next_attempt_at = now + timedelta(seconds=delay)
    audit_record(
        actor=None,
        action="run.retry_scheduled",
        subject_type="run",
        subject_id=run.id,
        data={"retry": run.retries, "in_seconds": delay, "error": outcome.error},
    )
    task_id_assign(run)  # run_finish saves it with the rest
    send_on_commit(RESUME_TASK, run, countdown=delay)
    return True


def _failed_before_with(run: Run, attempt: Attempt, error: str) -> bool:
    """Whether the attempt before this one failed with the same error: twice in a row. An
    attempt that got further in between (to an approval, the end of a turn) breaks the row, as
    a cancel does; one whose worker died says nothing either way and is looked past."""
    previous = (
        run.attempts.filter(number__lt=attempt.number)
        .exclude(status=AttemptStatus.LOST)
        .order_by("-number")
        .values_list("status", "error")
        .first()
    )
    return previous == (AttemptStatus.FAILED, error)


def _last_checkpoint(host: DatabaseHost | None, run: Run) -> int | None:
    """The run's highest checkpoint number, when this attempt's host has read or written it."""
    return host.checkpoints.known_last_number(str(run.pk)) if host is not None else None
