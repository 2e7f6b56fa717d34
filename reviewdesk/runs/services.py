"""Run lifecycle: submit, claim a lease, execute the turn loop, finish, cancel, retry, sweep.

The database row is the source of truth; Celery messages are only nudges. Every
task is idempotent (`run_claim` turns duplicates away), and the sweeper on beat
re-sends whatever a lost message or a dead worker left behind.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from agents.loop import Failed, Finished, Limits, Outcome, Waiting, advance
from agents.providers import AssistantTurn, ModelProvider, model_spec_errors, provider_for
from agents.registry import UnknownAgent, get_agent
from agents.state import AgentState, CallStatus
from reviewdesk import faults
from reviewdesk.accounts.roles import REVIEWERS, is_admin, is_submitter
from reviewdesk.approvals.models import ApprovalKind, ApprovalRequest, ApprovalStatus
from reviewdesk.approvals.selectors import user_may_decide
from reviewdesk.audit.services import audit_record
from reviewdesk.errors import Conflict, Forbidden, Invalid, NotFound
from reviewdesk.events.builders import approval_data, run_data
from reviewdesk.events.services import event_emit
from reviewdesk.runs.host import DatabaseHost, LeaseLost, approval_raise
from reviewdesk.runs.leases import LeaseKeeper
from reviewdesk.runs.models import ENDED, Attempt, Checkpoint, Message, Run, RunStatus
from reviewdesk.runs.selectors import run_audience, run_get_for_user

logger = logging.getLogger(__name__)

# Failure kinds (Run.error_kind): only transient ones are retried automatically.
TRANSIENT = "transient"


def _enqueue_on_commit(task_name: str, run: Run, *, countdown: float | None = None) -> None:
    """Send the task once the transaction commits; remember its id so cancel can revoke it."""
    from reviewdesk.runs import tasks

    task = getattr(tasks, task_name)
    run_id, task_id = str(run.pk), str(uuid.uuid4())
    run.task_id = task_id  # callers save the instance later: keep it current
    Run.objects.filter(pk=run.pk).update(task_id=task_id)
    # robust: a broker outage must not turn a committed run into a 500; the
    # sweeper re-enqueues queued runs whose message never arrived.
    transaction.on_commit(
        lambda: task.apply_async(args=[run_id], task_id=task_id, countdown=countdown), robust=True
    )


def _emit_run_updated(run: Run) -> None:
    event_emit(type="run.updated", data=run_data(run), run_id=run.pk, audience=run_audience(run))


def _cancel_open_approvals(run: Run, *, why: str) -> int:
    """Cancel the run's pending approvals; their desk items vanish live. Caller holds the run lock."""
    audience = run_audience(run)
    cancelled = 0
    for approval in ApprovalRequest.objects.filter(run=run, status=ApprovalStatus.PENDING):
        approval.status = ApprovalStatus.CANCELLED
        approval.save(update_fields=["status", "updated_at"])
        audit_record(
            actor=None,
            action="approval.cancelled",
            subject_type="approval",
            subject_id=approval.id,
            data={"why": why},
        )
        event_emit(type="approval.updated", data=approval_data(approval), run_id=run.pk, audience=audience)
        cancelled += 1
    return cancelled


# --- submit --------------------------------------------------------------------------


def run_validate(*, submitter, agent: str, model: Any, reviewers: list[str]) -> dict[str, list[str]]:
    """Field errors for a submission; empty when it can run."""
    errors: dict[str, list[str]] = {}
    try:
        agent_obj = get_agent(agent)
    except UnknownAgent:
        return {"agent": [f"unknown agent {agent!r}"]}
    spec_errors = model_spec_errors(model, {t.name for t in agent_obj.tools})
    if spec_errors:
        errors["model"] = spec_errors
    if reviewers:
        known = set(
            get_user_model()
            .objects.filter(username__in=reviewers, is_active=True, groups__name=REVIEWERS)
            .values_list("username", flat=True)
        )
        problems = [f"{name!r} is not a reviewer" for name in reviewers if name not in known]
        if submitter.get_username() in reviewers:
            problems.append("the submitter cannot review their own run")
        if problems:
            errors["reviewers"] = problems
    return errors


def run_submit(
    *,
    submitter,
    agent: str,
    input: str,
    model: dict[str, Any] | None = None,
    reviewers: list[str] | None = None,
    approval_ttl_seconds: int | None = None,
    metadata: dict[str, Any] | None = None,
) -> Run:
    if not is_submitter(submitter):
        raise Forbidden("only members of the submitters group can submit runs")
    reviewers = list(dict.fromkeys(reviewers or []))
    if model is None:
        with contextlib.suppress(UnknownAgent):  # reported by run_validate
            model = get_agent(agent).default_model
    errors = run_validate(submitter=submitter, agent=agent, model=model, reviewers=reviewers)
    if errors:
        raise Invalid("the run cannot be submitted as given", errors=errors)
    ttl = approval_ttl_seconds or get_agent(agent).approval_ttl_seconds or settings.DESK_APPROVAL_TTL_SECONDS
    with transaction.atomic():
        run = Run.objects.create(
            agent=agent,
            input=input,
            model=model,
            reviewers=reviewers,
            approval_ttl_seconds=ttl,
            metadata=metadata or {},
            submitted_by=submitter,
        )
        audit_record(
            actor=submitter,
            action="run.submitted",
            subject_type="run",
            subject_id=run.id,
            data={"agent": agent},
        )
        _emit_run_updated(run)
        _enqueue_on_commit("run", run)
    return run


# --- execute ---------------------------------------------------------------------------


def run_claim(*, run_id, worker: str) -> Attempt | None:
    """Take the run's lease if it is queued (and due), or running under an expired lease.

    None when another worker owns it, it is not due yet, or it has ended:
    duplicates of the task (redelivery, the sweeper, a double decision) return
    here harmlessly. A run whose workers keep dying is failed, not retried forever.
    """
    now = timezone.now()
    with transaction.atomic():
        run = Run.objects.select_for_update().filter(pk=run_id).first()
        if run is None:
            return None
        expired = run.status == RunStatus.RUNNING and run.lease_expires_at and run.lease_expires_at < now
        due = run.status == RunStatus.QUEUED and (run.next_attempt_at is None or run.next_attempt_at <= now)
        if not (due or expired):
            return None
        if expired:
            Attempt.objects.filter(run=run, status=Attempt.Status.RUNNING).update(
                status=Attempt.Status.LOST, ended_at=now
            )
            lost = _lost_in_a_row(run)
            if lost >= settings.DESK_MAX_LOST_ATTEMPTS:
                _fail(
                    run, f"gave up: the worker died {lost} times in a row running this run", kind="internal"
                )
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
        attempt = Attempt.objects.create(
            run=run,
            number=run.attempts.count() + 1,
            lease_epoch=run.lease_epoch,
            worker=worker,
            expires_at=run.lease_expires_at,
        )
        _emit_run_updated(run)
    attempt.run = run
    return attempt


def _lost_in_a_row(run: Run) -> int:
    lost = 0
    for status in run.attempts.order_by("-number").values_list("status", flat=True):
        if status != Attempt.Status.LOST:
            break
        lost += 1
    return lost


class _Guarded:
    """The model provider, not called once the lease is lost (a cancelled or fenced-out worker
    stops before paying for another model call), with the `after_model_call` fault point."""

    def __init__(self, provider: ModelProvider, host: DatabaseHost) -> None:
        self.provider, self.host = provider, host

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AssistantTurn:
        self.host.check_lease()
        turn = self.provider.complete(messages, tools)
        faults.point("after_model_call")
        return turn


def run_execute(*, run_id, worker: str = "") -> Outcome | None:
    """The body of the `run` and `resume` tasks: advance the run as far as it goes."""
    attempt = run_claim(run_id=run_id, worker=worker)
    if attempt is None:
        return None
    run = attempt.run
    host = DatabaseHost(run=run, attempt=attempt)
    try:
        with LeaseKeeper(attempt, cancel_epoch=run.cancel_epoch) as keeper:
            host.lease_lost = keeper.lost
            provider = provider_for(
                run.model,
                openai_options={
                    "base_url": settings.OPENAI_BASE_URL,
                    "api_key": settings.OPENAI_API_KEY,
                    "timeout": settings.OPENAI_TIMEOUT_SECONDS,
                    "max_retries": settings.OPENAI_MAX_RETRIES,
                },
            )
            outcome = advance(
                agent=get_agent(run.agent), provider=_Guarded(provider, host), host=host, limits=_limits()
            )
    except LeaseLost as exc:
        _record_stale_write(attempt, str(exc))
        return None
    except Exception as exc:  # a bug must end the run visibly, not leave it running
        logger.exception("run %s failed with an internal error", run.id)
        outcome = Failed(f"internal error: {type(exc).__name__}: {exc}", kind="internal")
    run_finish(attempt=attempt, outcome=outcome)
    return outcome


def _limits() -> Limits:
    return Limits(
        max_model_calls=settings.DESK_MAX_MODEL_CALLS,
        max_invalid_calls=settings.DESK_MAX_INVALID_CALLS,
        wait_notice_after=timedelta(seconds=settings.DESK_WAIT_NOTICE_SECONDS),
    )


def run_finish(*, attempt: Attempt, outcome: Outcome) -> None:
    """Record the outcome, fenced on the attempt's lease; release the lease."""
    now = timezone.now()
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=attempt.run_id)
        if run.status != RunStatus.RUNNING or run.lease_epoch != attempt.lease_epoch:
            _record_stale_write(attempt, f"finish as {type(outcome).__name__} after losing the lease")
            return
        attempt_status, attempt_error = Attempt.Status.RELEASED, ""
        if isinstance(outcome, Finished):
            run.status, run.output = RunStatus.SUCCEEDED, outcome.output
            _cancel_open_approvals(run, why="the run finished")
            audit_record(actor=None, action="run.succeeded", subject_type="run", subject_id=run.id)
        elif isinstance(outcome, Failed):
            attempt_status, attempt_error = Attempt.Status.FAILED, outcome.error
            if outcome.kind == "approval":
                audit_record(
                    actor=None,
                    action="decision.refused",
                    subject_type="run",
                    subject_id=run.id,
                    data={"tool_call_id": outcome.call_id, "reason": outcome.error},
                )
            if not _retry_automatically(run, attempt, outcome, now):
                _fail(run, outcome.error, kind=outcome.kind, save=False)
        elif isinstance(outcome, Waiting):
            decided_meanwhile = _decided_meanwhile(run, outcome.call_ids)
            if decided_meanwhile:  # a decision landed while we held the lease
                run.status = RunStatus.QUEUED
                _enqueue_on_commit("resume", run)
            else:
                run.status = RunStatus.INPUT_REQUIRED
        run.lease_expires_at = None
        run.revision += 1
        run.save()
        Attempt.objects.filter(pk=attempt.pk).update(status=attempt_status, ended_at=now, error=attempt_error)
        _emit_run_updated(run)


def _decided_meanwhile(run: Run, call_ids: tuple[str, ...]) -> bool:
    """Whether any waiting call's current request (its latest live one) was answered already."""
    latest: dict[str, str] = {}
    requests = ApprovalRequest.objects.filter(run=run, tool_call_id__in=call_ids).exclude(
        status=ApprovalStatus.CANCELLED
    )
    for tool_call_id, status in requests.order_by("created_at").values_list("tool_call_id", "status"):
        latest[tool_call_id] = status
    return any(status != ApprovalStatus.PENDING for status in latest.values())


def _retry_automatically(run: Run, attempt: Attempt, outcome: Failed, now) -> bool:
    """Queue a transient failure again with exponential backoff, within the retry budget.

    The same error twice in a row stops automatic retries: it is not transient after all.
    """
    if outcome.kind != TRANSIENT or run.retries >= settings.DESK_AUTO_RETRIES:
        return False
    previous = (
        run.attempts.filter(number__lt=attempt.number, status=Attempt.Status.FAILED)
        .order_by("-number")
        .values_list("error", flat=True)
        .first()
    )
    if previous == outcome.error:
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
    _enqueue_on_commit("resume", run, countdown=delay)
    return True


def _fail(run: Run, error: str, *, kind: str, save: bool = True) -> None:
    """End the run as failed. Caller holds the run lock."""
    run.status, run.error, run.error_kind = RunStatus.FAILED, error, kind
    run.lease_expires_at = None
    Attempt.objects.filter(run=run, status=Attempt.Status.RUNNING).update(
        status=Attempt.Status.FAILED, ended_at=timezone.now(), error=error
    )
    _cancel_open_approvals(run, why="the run failed")
    audit_record(
        actor=None,
        action="run.failed",
        subject_type="run",
        subject_id=run.id,
        data={"error": error, "kind": kind},
    )
    if save:
        run.revision += 1
        run.save()
        _emit_run_updated(run)


def _record_stale_write(attempt: Attempt, detail: str) -> None:
    logger.warning("rejected a stale write from attempt %s: %s", attempt.pk, detail)
    audit_record(
        actor=None,
        action="attempt.stale_write_rejected",
        subject_type="run",
        subject_id=attempt.run_id,
        data={"attempt": attempt.number, "lease_epoch": attempt.lease_epoch, "detail": detail},
    )


# --- control: cancel and retry ------------------------------------------------------------


def _may_control(user, run: Run) -> bool:
    return is_admin(user) or run.submitted_by_id == user.pk or user_may_decide(user, run)


def run_cancel(*, run_id, user) -> Run:
    """Cancel for good: bump cancel_epoch (fencing out any worker), cancel pending approvals,
    revoke the queued task. A decision arriving afterwards is 409."""
    visible = run_get_for_user(run_id=run_id, user=user)
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=visible.pk)
        if not _may_control(user, run):
            raise Forbidden("only the submitter, its reviewers or an admin can cancel this run")
        if run.status in ENDED:
            raise Conflict(f"the run has already ended ({run.status})", code="ended")
        run.cancel_epoch += 1
        run.status = RunStatus.CANCELLED
        run.error, run.error_kind = f"cancelled by {user.get_username()}", "cancelled"
        run.lease_expires_at = run.next_attempt_at = None
        run.revision += 1
        run.save()
        Attempt.objects.filter(run=run, status=Attempt.Status.RUNNING).update(
            status=Attempt.Status.CANCELLED, ended_at=timezone.now()
        )
        _cancel_open_approvals(run, why=f"run cancelled by {user.get_username()}")
        audit_record(actor=user, action="run.cancelled", subject_type="run", subject_id=run.id)
        _emit_run_updated(run)
        if run.task_id:
            task_id = run.task_id
            transaction.on_commit(lambda: _revoke(task_id), robust=True)
    return run


def _revoke(task_id: str) -> None:
    from reviewdesk.celery import app

    # Best effort: a queued task is dropped; a running one is stopped by fencing.
    app.control.revoke(task_id)


def run_retry(*, run_id, user, checkpoint_id: str | None = None) -> Run:
    """Run a failed or cancelled run again from its latest (or a named) checkpoint, in a new attempt.

    Old attempts, messages and approvals keep their history. Calls that were
    still waiting get new approval requests; going back to an earlier
    checkpoint sets aside (but keeps) the messages after it.
    """
    visible = run_get_for_user(run_id=run_id, user=user)
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=visible.pk)
        if not (is_admin(user) or run.submitted_by_id == user.pk):
            raise Forbidden("only the submitter or an admin can retry this run")
        if run.status not in (RunStatus.FAILED, RunStatus.CANCELLED):
            raise Conflict(
                f"only a failed or cancelled run can be retried; this one is {run.status}", code="not_ended"
            )
        latest = Checkpoint.objects.filter(run=run).order_by("-number").first()
        start = latest
        if checkpoint_id is not None:
            start = Checkpoint.objects.filter(run=run, pk=checkpoint_id).first()
            if start is None:
                raise NotFound("no such checkpoint in this run")
            if start.branch != run.branch:
                # Its messages were set aside by an earlier retry: resuming there would mix two histories.
                raise Conflict(
                    "that checkpoint belongs to an abandoned line of this run's history", code="abandoned"
                )
        refused = run.error_kind == "approval"  # the gate refused a decision: ask again
        run.status = RunStatus.QUEUED
        run.error, run.error_kind, run.next_attempt_at = None, "", None
        if start is not None and start != latest:
            _restart_from(run, start)
        run.revision += 1
        run.save()
        if start is not None:
            _reraise_waiting_calls(run, refused=refused)
        audit_record(
            actor=user,
            action="run.retried",
            subject_type="run",
            subject_id=run.id,
            data={"checkpoint_id": str(start.pk) if start else None},
        )
        _emit_run_updated(run)
        _enqueue_on_commit("resume", run)
    return run


def _restart_from(run: Run, start: Checkpoint) -> None:
    """Make `start` the latest checkpoint again: later messages are set aside, new call ids branch."""
    Message.objects.filter(run=run, position__gte=start.message_count, superseded_at__isnull=True).update(
        superseded_at=timezone.now()
    )
    _cancel_open_approvals(run, why="retried from an earlier checkpoint")
    run.branch += 1
    number = Checkpoint.objects.filter(run=run).order_by("-number").values_list("number", flat=True).first()
    Checkpoint.objects.create(
        run=run,
        branch=run.branch,
        number=number + 1,
        schema_version=start.schema_version,
        message_count=start.message_count,
        snapshot=start.snapshot,
    )


def _reraise_waiting_calls(run: Run, *, refused: bool) -> None:
    """Calls still waiting in the latest checkpoint get a new request when theirs can no
    longer be answered: cancelled, expired, or (after a refusal) an approval the gate refused.
    An unknown effect always gets a reconciliation: it never settles without a human."""
    latest = Checkpoint.objects.filter(run=run).order_by("-number").first()
    state = AgentState.from_snapshot(latest.snapshot)
    to_raise = []
    for call in state.batch:
        if call.status not in (CallStatus.AWAITING, CallStatus.UNKNOWN):
            continue
        kind = ApprovalKind.RECONCILE if call.status == CallStatus.UNKNOWN else ApprovalKind.TOOL_CALL
        current = (
            ApprovalRequest.objects.filter(run=run, tool_call_id=call.id, kind=kind)
            .select_related("decision")
            .order_by("-created_at")
            .first()
        )
        if (
            current is None
            or current.status in (ApprovalStatus.CANCELLED, ApprovalStatus.EXPIRED)
            or (
                current.status == ApprovalStatus.APPROVED and refused and current.decision.consumed_at is None
            )
        ):
            to_raise.append(call)
    if not to_raise:
        return
    for call in to_raise:
        call.checkpoint_id = str(latest.pk)
    latest.snapshot = state.to_snapshot()
    latest.save(update_fields=["snapshot"])
    for call in to_raise:
        approval_raise(run=run, attempt=None, checkpoint_id=latest.pk, call=call)


# --- the sweeper ---------------------------------------------------------------------


def runs_sweep() -> dict[str, int]:
    """Beat's safety net: re-send lost messages and expired leases, expire approvals."""
    from reviewdesk.runs.tasks import resume

    now = timezone.now()
    stale = now - timedelta(seconds=settings.DESK_REQUEUE_AFTER_SECONDS)
    lost_messages = list(
        Run.objects.filter(status=RunStatus.QUEUED, updated_at__lt=stale)
        .exclude(next_attempt_at__gt=now)
        .values_list("id", flat=True)
    )
    expired_leases = list(
        Run.objects.filter(status=RunStatus.RUNNING, lease_expires_at__lt=now).values_list("id", flat=True)
    )
    requeued = 0
    for run_id in [*lost_messages, *expired_leases]:
        # Touch the row first, so the next sweep waits its turn instead of piling up duplicates.
        Run.objects.filter(pk=run_id).update(updated_at=now)
        try:
            resume.delay(str(run_id))
            requeued += 1
        except Exception:
            logger.exception("sweeper could not enqueue run %s", run_id)
    return {"requeued": requeued, "expired": approvals_expire(now=now)}


def approvals_expire(*, now) -> int:
    """Expire overdue approvals. The agent's policy says what follows: by default the model
    is told the request expired and the run goes on; `fail` ends the run."""
    expired = 0
    # A reconciliation never expires: an effect of unknown outcome waits for a human.
    overdue = ApprovalRequest.objects.filter(status=ApprovalStatus.PENDING, expires_at__lte=now).exclude(
        kind=ApprovalKind.RECONCILE
    )
    for approval_id in overdue.values_list("id", flat=True):
        with transaction.atomic():
            approval = ApprovalRequest.objects.get(pk=approval_id)
            run = Run.objects.select_for_update().get(pk=approval.run_id)
            # Compare-and-set: a decision that won the race keeps its verdict.
            if (
                ApprovalRequest.objects.filter(pk=approval_id, status=ApprovalStatus.PENDING).update(
                    status=ApprovalStatus.EXPIRED
                )
                != 1
            ):
                continue
            approval.refresh_from_db()
            expired += 1
            audit_record(
                actor=None, action="approval.expired", subject_type="approval", subject_id=approval.id
            )
            event_emit(
                type="approval.updated",
                data=approval_data(approval),
                run_id=run.pk,
                audience=run_audience(run),
            )
            if run.status in ENDED:
                continue
            if get_agent(run.agent).on_approval_expired == "fail":
                run.cancel_epoch += 1  # fences out a worker that may hold the run
                _fail(
                    run,
                    f"approval for {approval.tool} ({approval.tool_call_id}) expired",
                    kind="approval_expired",
                )
            elif run.status == RunStatus.INPUT_REQUIRED:
                run.status = RunStatus.QUEUED
                run.revision += 1
                run.save(update_fields=["status", "revision", "updated_at"])
                _emit_run_updated(run)
                _enqueue_on_commit("resume", run)
    return expired
