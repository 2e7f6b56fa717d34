"""Run lifecycle: submit, claim a lease, execute the turn loop, finish, sweep."""

from __future__ import annotations

import contextlib
import logging
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from agents.loop import Failed, Finished, Limits, Outcome, Waiting, advance
from agents.providers import model_spec_errors, provider_for
from agents.registry import UnknownAgent, get_agent
from reviewdesk.accounts.roles import REVIEWERS, is_submitter
from reviewdesk.approvals.models import ApprovalRequest, ApprovalStatus
from reviewdesk.audit.services import audit_record
from reviewdesk.errors import Forbidden, Invalid
from reviewdesk.events.builders import approval_data, run_data
from reviewdesk.events.services import event_emit
from reviewdesk.runs.host import DatabaseHost, LeaseLost
from reviewdesk.runs.models import Attempt, Run, RunStatus
from reviewdesk.runs.selectors import run_audience

logger = logging.getLogger(__name__)


def _enqueue_on_commit(task_name: str, run_id) -> None:
    from reviewdesk.runs import tasks

    task = getattr(tasks, task_name)
    run_id = str(run_id)
    # robust: a broker outage must not turn a committed run into a 500; the
    # sweeper re-enqueues queued runs whose message never arrived.
    transaction.on_commit(lambda: task.delay(run_id), robust=True)


def _emit_run_updated(run: Run) -> None:
    event_emit(type="run.updated", data=run_data(run), run_id=run.pk, audience=run_audience(run))


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
        _enqueue_on_commit("run", run.id)
    return run


def run_claim(*, run_id, worker: str) -> Attempt | None:
    """Take the run's lease if it is queued, or running under an expired lease.

    None when another worker owns it or it has ended: duplicates of the task
    (redelivery, the sweeper, a double decision) return here harmlessly.
    """
    now = timezone.now()
    with transaction.atomic():
        run = Run.objects.select_for_update().filter(pk=run_id).first()
        if run is None:
            return None
        expired = run.status == RunStatus.RUNNING and run.lease_expires_at and run.lease_expires_at < now
        if run.status != RunStatus.QUEUED and not expired:
            return None
        if expired:
            Attempt.objects.filter(run=run, status=Attempt.Status.RUNNING).update(
                status=Attempt.Status.LOST, ended_at=now
            )
        run.status = RunStatus.RUNNING
        run.lease_epoch += 1
        run.lease_expires_at = now + timedelta(seconds=settings.DESK_LEASE_SECONDS)
        run.revision += 1
        run.save(update_fields=["status", "lease_epoch", "lease_expires_at", "revision", "updated_at"])
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


def run_execute(*, run_id, worker: str = "") -> Outcome | None:
    """The body of the `run` and `resume` tasks: advance the run as far as it goes."""
    attempt = run_claim(run_id=run_id, worker=worker)
    if attempt is None:
        return None
    run = attempt.run
    host = DatabaseHost(run=run, attempt=attempt)
    try:
        provider = provider_for(
            run.model,
            openai_options={
                "base_url": settings.OPENAI_BASE_URL,
                "api_key": settings.OPENAI_API_KEY,
                "timeout": settings.OPENAI_TIMEOUT_SECONDS,
                "max_retries": settings.OPENAI_MAX_RETRIES,
            },
        )
        outcome = advance(agent=get_agent(run.agent), provider=provider, host=host, limits=_limits())
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
        attempt_status = Attempt.Status.RELEASED
        if isinstance(outcome, Finished):
            run.status, run.output = RunStatus.SUCCEEDED, outcome.output
            audit_record(actor=None, action="run.succeeded", subject_type="run", subject_id=run.id)
        elif isinstance(outcome, Failed):
            run.status, run.error, run.error_kind = RunStatus.FAILED, outcome.error, outcome.kind
            attempt_status = Attempt.Status.FAILED
            if outcome.kind == "approval":
                audit_record(
                    actor=None,
                    action="decision.refused",
                    subject_type="run",
                    subject_id=run.id,
                    data={"tool_call_id": outcome.call_id, "reason": outcome.error},
                )
            audit_record(
                actor=None,
                action="run.failed",
                subject_type="run",
                subject_id=run.id,
                data={"error": outcome.error, "kind": outcome.kind},
            )
        elif isinstance(outcome, Waiting):
            decided_meanwhile = (
                ApprovalRequest.objects.filter(run=run, tool_call_id__in=outcome.call_ids)
                .exclude(status=ApprovalStatus.PENDING)
                .exists()
            )
            if decided_meanwhile:  # a decision landed while we held the lease
                run.status = RunStatus.QUEUED
                _enqueue_on_commit("resume", run.id)
            else:
                run.status = RunStatus.INPUT_REQUIRED
        run.lease_expires_at = None
        run.revision += 1
        run.save()
        Attempt.objects.filter(pk=attempt.pk).update(status=attempt_status, ended_at=now)
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


def runs_sweep() -> dict[str, int]:
    """Beat's safety net: re-enqueue lost messages and expired leases, expire approvals."""
    from reviewdesk.runs.tasks import resume

    now = timezone.now()
    stale_queued = Run.objects.filter(
        status=RunStatus.QUEUED,
        updated_at__lt=now - timedelta(seconds=settings.DESK_REQUEUE_AFTER_SECONDS),
    ).values_list("id", flat=True)
    expired_leases = Run.objects.filter(status=RunStatus.RUNNING, lease_expires_at__lt=now).values_list(
        "id", flat=True
    )
    requeued = 0
    for run_id in [*stale_queued, *expired_leases]:
        try:
            resume.delay(str(run_id))
            requeued += 1
        except Exception:
            logger.exception("sweeper could not enqueue run %s", run_id)
    return {"requeued": requeued, "expired": approvals_expire(now=now)}


def approvals_expire(*, now) -> int:
    """Expire overdue approvals; the model is told, and the run resumes."""
    expired = 0
    for approval_id in ApprovalRequest.objects.filter(
        status=ApprovalStatus.PENDING, expires_at__lte=now
    ).values_list("id", flat=True):
        with transaction.atomic():
            approval = ApprovalRequest.objects.select_related("run").get(pk=approval_id)
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
            if run.status == RunStatus.INPUT_REQUIRED:
                run.status = RunStatus.QUEUED
                run.revision += 1
                run.save(update_fields=["status", "revision", "updated_at"])
                _emit_run_updated(run)
                _enqueue_on_commit("resume", run.id)
    return expired
