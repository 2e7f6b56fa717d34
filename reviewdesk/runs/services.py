"""Run control: submit, cancel, retry. Executing a run is `execution.py`; beat's
safety net is `sweeper.py`.

The database row is the source of truth; Celery messages are only nudges, sent
on commit. Each service locks the run row, checks who asks and what state the
run is in, then changes it.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from agents.definition import digests, fingerprint
from agents.providers import ProviderName, model_spec_errors
from agents.registry import UnknownAgent, get_agent
from agents.state import SnapshotError
from reviewdesk.accounts.roles import REVIEWERS, is_admin, is_submitter
from reviewdesk.approvals.access import may_review_run
from reviewdesk.approvals.lifecycle.raising import approvals_cancel_open, approvals_reraise_waiting
from reviewdesk.audit.services import audit_record
from reviewdesk.lib.db import atomic_appends_last
from reviewdesk.lib.errors import CheckpointNotFound, Conflict, Forbidden, Invalid
from reviewdesk.runs.access import run_get_visible
from reviewdesk.runs.models import (
    ENDED,
    Attempt,
    AttemptStatus,
    Checkpoint,
    ErrorKind,
    Message,
    Run,
    RunStatus,
)
from reviewdesk.runs.retention import checkpoints_prune
from reviewdesk.runs.rows import run_insert
from reviewdesk.runs.transitions import (
    RESUME_TASK,
    RUN_TASK,
    revoke_on_commit,
    run_emit_updated,
    run_retry_budgets_renew,
    send_on_commit,
    task_id_assign,
)

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def run_submission_errors(
    *, submitter: User, agent: str, model: Any, reviewers: list[str]
) -> dict[str, list[str]]:
    """Field errors for a submission; empty when it can run."""
    errors: dict[str, list[str]] = {}
    try:
        agent_obj = get_agent(agent)
    except UnknownAgent:
        return {"agent": [f"unknown agent {agent!r}"]}
    spec_errors = model_spec_errors(model, {t.name for t in agent_obj.all_tools()})
    if (
        isinstance(model, dict)
        and model.get("provider") == ProviderName.SCRIPTED
        and not settings.DESK_ALLOW_SCRIPTED_MODEL
    ):
        # A script lets the submitter write the tool calls: only where the operator allows it.
        spec_errors = [
            "model/provider: the scripted provider is disabled here (DESK_ALLOW_SCRIPTED_MODEL is off)"
        ]
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
    submitter: User,
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
    defaulted = model is None
    if defaulted:
        with contextlib.suppress(UnknownAgent):  # reported by run_submission_errors
            model = get_agent(agent).default_model
    errors = run_submission_errors(submitter=submitter, agent=agent, model=model, reviewers=reviewers)
    if defaulted and "model" in errors:
        # The agent's own model cannot run here (the demo's is the scripted provider, which
        # needs the script the submitter writes): say what to send, not what is wrong with a
        # field the client never sent.
        errors["model"] = [
            f"required: agent {agent!r} has no model that runs here without one; send "
            '{"provider": "scripted", "script": [...]} or {"provider": "openai", "name": "..."}'
        ]
    if errors:
        raise Invalid("the run cannot be submitted as given", errors=errors)
    definition = get_agent(agent)
    ttl = approval_ttl_seconds or definition.approval_ttl_seconds or settings.DESK_APPROVAL_TTL_SECONDS
    with atomic_appends_last():
        run = Run(
            agent=agent,
            # The definition the run starts with: a resume under another checks its calls again.
            definition_sha256=fingerprint(definition),
            definition_digests=digests(definition),
            input=input,
            model=model,
            reviewers=reviewers,
            approval_ttl_seconds=ttl,
            metadata=metadata or {},
            submitted_by=submitter,
        )
        task_id_assign(run)  # inserted with the row: no UPDATE for it
        run_insert(run)
        audit_record(
            actor=submitter,
            action="run.submitted",
            subject_type="run",
            subject_id=run.id,
            data={"agent": agent},
        )
        run_emit_updated(run)
        send_on_commit(RUN_TASK, run)
    return run


def _may_control(user: User, run: Run, scopes: frozenset[str] | None) -> bool:
    """Admins, the submitter (with the submit scope) and its reviewers (with the review scope).
    `scopes` is the API token's; None for a signed-in page, which carries every role it has."""

    def holds(scope: str) -> bool:
        return scopes is None or scope in scopes

    if is_admin(user):
        return True
    if run.submitted_by_id == user.pk and holds("submit"):
        return True
    return holds("review") and may_review_run(user, run)


def run_cancel(*, run_id: Any, user: User, scopes: frozenset[str] | None = None) -> Run:
    """Cancel for good: bump cancel_epoch (fencing out any worker), cancel pending approvals,
    revoke the queued task. A decision arriving afterwards is 409."""
    visible = run_get_visible(run_id=run_id, user=user)
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=visible.pk)
        if not _may_control(user, run, scopes):
            raise Forbidden("only the submitter, its reviewers or an admin can cancel this run")
        if run.status in ENDED:
            raise Conflict(f"the run has already ended ({run.status})", code="ended")
        run.cancel_epoch += 1
        run.status = RunStatus.CANCELLED
        run.error, run.error_kind = f"cancelled by {user.get_username()}", ErrorKind.CANCELLED
        run.lease_expires_at = run.next_attempt_at = None
        run.revision += 1
        run.save(
            update_fields=[
                "cancel_epoch",
                "status",
                "error",
                "error_kind",
                "lease_expires_at",
                "next_attempt_at",
                "revision",
                "updated_at",
            ]
        )
        Attempt.objects.filter(run=run, status=AttemptStatus.RUNNING).update(
            status=AttemptStatus.CANCELLED, ended_at=timezone.now()
        )
        approvals_cancel_open(run=run, why=f"run cancelled by {user.get_username()}")
        checkpoints_prune(run)
        audit_record(actor=user, action="run.cancelled", subject_type="run", subject_id=run.id)
        run_emit_updated(run)
        if run.task_id:
            revoke_on_commit(run.task_id)
    return run


def run_retry(*, run_id: Any, user: User, checkpoint_id: str | None = None) -> Run:
    """Run a failed or cancelled run again from its latest (or a named) checkpoint, in a new attempt.

    Old attempts, messages and approvals keep their history. Calls that were
    still waiting get new approval requests; going back to an earlier
    checkpoint sets aside (but keeps) the messages after it.
    """
    visible = run_get_visible(run_id=run_id, user=user)
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=visible.pk)
        if not (is_admin(user) or run.submitted_by_id == user.pk):
            raise Forbidden("only the submitter or an admin can retry this run")
        if run.is_external:
            raise Conflict("an external run is retried by its framework, not by the desk", code="external")
        if run.status not in (RunStatus.FAILED, RunStatus.CANCELLED):
            raise Conflict(
                f"only a failed or cancelled run can be retried; this one is {run.status}", code="not_ended"
            )
        latest = Checkpoint.objects.filter(run=run).order_by("-number").first()
        start = latest
        if checkpoint_id is not None:
            start = Checkpoint.objects.filter(run=run, pk=checkpoint_id).first()
            if start is None:
                raise CheckpointNotFound("no such checkpoint in this run")
            if start.branch != run.branch:
                # Its messages were set aside by an earlier retry: resuming there would mix two histories.
                raise Conflict(
                    "that checkpoint belongs to an abandoned line of this run's history", code="abandoned"
                )
        refused = run.error_kind == ErrorKind.APPROVAL  # the gate refused a decision: ask again
        run.status = RunStatus.QUEUED
        run.error, run.error_kind, run.next_attempt_at = None, "", None
        run.retried_at_epoch = run.lease_epoch  # the attempts so far died, if they did, before it
        # A new go at the run: the automatic-retry budget afresh, and the tools' (a call that
        # stayed unavailable gets its tries again), as a follow-up's next turn does.
        run_retry_budgets_renew(run)
        if start is not None and start != latest:
            _restart_from(run, start)
        run.revision += 1
        task_id_assign(run)  # sent at the end, after the run's event
        run.save(
            update_fields=[
                "status",
                "error",
                "error_kind",
                "next_attempt_at",
                "retries",
                "retried_at_epoch",
                "branch",
                "revision",
                "task_id",
                "updated_at",
            ]
        )
        if start is not None:
            try:
                approvals_reraise_waiting(run=run, refused=refused)
            except SnapshotError as exc:  # its batch no longer matches the log (v6)
                raise Conflict(f"the run cannot continue from its last checkpoint: {exc}") from None
        audit_record(
            actor=user,
            action="run.retried",
            subject_type="run",
            subject_id=run.id,
            data={"checkpoint_id": str(start.pk) if start else None},
        )
        run_emit_updated(run)
        send_on_commit(RESUME_TASK, run)
    return run


def _restart_from(run: Run, start: Checkpoint) -> None:
    """Make `start` the latest checkpoint again: later messages are set aside, new call ids branch."""
    Message.objects.filter(run=run, position__gte=start.message_count, superseded_at__isnull=True).update(
        superseded_at=timezone.now()
    )
    approvals_cancel_open(run=run, why="retried from an earlier checkpoint")
    run.branch += 1
    latest_number = Checkpoint.objects.filter(run=run).order_by("-number").values_list("number", flat=True)
    Checkpoint.objects.create(
        run=run,
        branch=run.branch,
        number=(latest_number.first() or 0) + 1,
        schema_version=start.schema_version,
        message_count=start.message_count,
        snapshot=start.snapshot,
    )
