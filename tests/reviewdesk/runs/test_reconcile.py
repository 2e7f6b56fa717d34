"""An effect cut between pending and confirmed becomes a reconciliation item on the desk."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.approvals.models import ApprovalRequest, Decision
from reviewdesk.approvals.reads.representation import approval_data
from reviewdesk.runs.execution import run_execute
from reviewdesk.runs.models import Run, RunStatus, SideEffect

pytestmark = pytest.mark.django_db


def approved_then_left_pending(run, approval, reviewer, *, attempt=None) -> SideEffect:
    """`approval` approved by `reviewer`, and its ledger row left `pending`, as an attempt
    leaves it that consumed the decision and died before the effect."""
    decision = approval_decide(
        approval_id=approval.id,
        reviewer=reviewer,
        verdict="approve",
        checkpoint_id=str(approval.checkpoint_id),
    )
    return SideEffect.objects.create(
        run=run,
        idempotency_key=f"{run.id}:{approval.tool_call_id}",
        tool_call_id=approval.tool_call_id,
        tool=approval.tool,
        status="pending",
        decision=decision,
        attempt=attempt,
    )


@pytest.fixture
def interrupted(interrupted_run, personas, mailoutbox):
    """send_email approved, then its worker 'died' after writing pending: the next attempt must not resend."""
    run, approval = interrupted_run()
    approved_then_left_pending(run, approval, personas.alice)
    run_execute(run_id=run.id)
    run.refresh_from_db()
    assert run.status == RunStatus.INPUT_REQUIRED
    assert mailoutbox == []
    reconcile = ApprovalRequest.objects.get(run=run, kind="reconcile", status="pending")
    assert reconcile.tool_call_id == approval.tool_call_id
    assert SideEffect.objects.get(run=run).status == "unknown"
    return run, reconcile


def answer(api_as, reviewer, reconcile, **body):
    return api_as(reviewer, "review").post(
        f"/api/v1/approvals/{reconcile.id}/decision",
        {"checkpoint_id": str(reconcile.checkpoint_id), **body},
        format="json",
    )


def past_the_hard_time_limit(run, attempt=None):
    """Age the effect's stale attempt (or, with none recorded, the row) past CELERY_TASK_TIME_LIMIT:
    its task has been killed, so a re-run may be signed (approvals.deciding.checks, frozen-worker window)."""
    from datetime import timedelta

    from django.conf import settings
    from django.utils import timezone

    long_ago = timezone.now() - timedelta(seconds=settings.CELERY_TASK_TIME_LIMIT + 1)
    if attempt is not None:
        type(attempt).objects.filter(pk=attempt.pk).update(started_at=long_ago)
    else:
        SideEffect.objects.filter(run=run).update(updated_at=long_ago)


def finish(run):
    run_execute(run_id=run.id)
    run.refresh_from_db()
    return run


def test_marking_it_done_records_the_reference_and_never_resends(interrupted, personas, api_as, mailoutbox):
    run, reconcile = interrupted
    response = answer(api_as, personas.bob, reconcile, verdict="confirm", external_ref="smtp-queue-1234")
    assert response.status_code == 201, response.json()
    effect = SideEffect.objects.get(run=run)
    assert (effect.status, effect.external_ref) == ("confirmed", "smtp-queue-1234")
    run = finish(run)
    assert run.status == RunStatus.SUCCEEDED
    assert mailoutbox == []
    tool_result = next(
        m.body["content"] for m in run.messages.all() if m.role == "tool" and "smtp" in m.body["content"]
    )
    assert '"reconciled": true' in tool_result


def test_marking_it_done_needs_a_reference(interrupted, personas, api_as):
    _, reconcile = interrupted
    response = answer(api_as, personas.bob, reconcile, verdict="confirm")
    assert response.status_code == 422
    assert "reference" in response.json()["detail"]


def test_a_signed_rerun_sends_it_exactly_once(interrupted, personas, api_as, mailoutbox):
    run, reconcile = interrupted
    past_the_hard_time_limit(run)
    response = answer(api_as, personas.bob, reconcile, verdict="rerun", reason="not in the SMTP log")
    assert response.status_code == 201
    assert response.json()["payload"]["verdict"] == "rerun"
    run = finish(run)
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert len(mailoutbox) == 1
    assert SideEffect.objects.get(run=run).status == "confirmed"
    assert finish(run).status == RunStatus.SUCCEEDED and len(mailoutbox) == 1


def test_rejecting_tells_the_model_and_sends_nothing(interrupted, personas, api_as, mailoutbox):
    run, reconcile = interrupted
    answer(api_as, personas.bob, reconcile, verdict="reject", reason="customer called instead")
    run = finish(run)
    assert run.status == RunStatus.SUCCEEDED
    assert mailoutbox == []
    assert any("customer called instead" in m.body["content"] for m in run.messages.all() if m.role == "tool")


@pytest.mark.parametrize("verdict", ["approve", "edit"])
def test_a_reconciliation_is_not_answered_with_an_approval(interrupted, personas, api_as, verdict):
    _, reconcile = interrupted
    response = answer(
        api_as, personas.bob, reconcile, verdict=verdict, **({"arguments": {}} if verdict == "edit" else {})
    )
    assert response.status_code == 422


def test_a_tool_call_approval_is_not_answered_with_a_rerun(interrupted_run, personas, api_as):
    _, approval = interrupted_run()
    response = answer(api_as, personas.bob, approval, verdict="rerun")
    assert response.status_code == 422


def test_after_an_edit_the_reconciliation_and_its_rerun_use_the_edited_arguments(
    interrupted_run, personas, api_as, mailoutbox
):
    """Found in review: the re-run used the model's original arguments the reviewer had edited away."""
    run, approval = interrupted_run()
    edited = {**approval.arguments, "to": "right@example.com"}
    decision = approval_decide(
        approval_id=approval.id,
        reviewer=personas.alice,
        verdict="edit",
        arguments=edited,
        checkpoint_id=str(approval.checkpoint_id),
    )
    # The edit was consumed and its effect cut short: as a real crash leaves it.
    from django.utils import timezone

    type(decision).objects.filter(pk=decision.pk).update(consumed_at=timezone.now())
    SideEffect.objects.create(
        run=run,
        idempotency_key=f"{run.id}:{approval.tool_call_id}",
        tool_call_id=approval.tool_call_id,
        tool="send_email",
        status="pending",
        decision=decision,
    )
    run = finish(run)
    reconcile = ApprovalRequest.objects.get(run=run, kind="reconcile")
    assert reconcile.arguments == edited
    past_the_hard_time_limit(run)
    answer(api_as, personas.bob, reconcile, verdict="rerun")
    run = finish(run)
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert [m.to for m in mailoutbox] == [["right@example.com"]]


def test_a_reconciliation_never_expires(interrupted, personas):
    from datetime import timedelta

    from django.utils import timezone

    from reviewdesk.approvals.lifecycle.expiry import approvals_expire

    _run, reconcile = interrupted
    ApprovalRequest.objects.filter(pk=reconcile.pk).update(expires_at=timezone.now() - timedelta(hours=1))
    assert approvals_expire(now=timezone.now()) == 0
    reconcile.refresh_from_db()
    assert reconcile.status == "pending"


def test_cancel_then_retry_asks_a_human_again_instead_of_settling_the_unknown_effect(
    interrupted, personas, api_as, mailoutbox
):
    """Found in review: the retried run succeeded with the effect still unknown, nobody asked."""
    run, reconcile = interrupted
    carol = api_as(personas.carol, "submit")
    carol.post(f"/api/v1/runs/{run.id}/cancel")
    assert carol.post(f"/api/v1/runs/{run.id}/retry").status_code == 201
    run = finish(run)
    assert run.status == RunStatus.INPUT_REQUIRED
    fresh = ApprovalRequest.objects.get(run=run, kind="reconcile", status="pending")
    assert fresh.pk != reconcile.pk
    assert SideEffect.objects.get(run=run).status == "unknown"
    assert mailoutbox == []


def test_a_late_confirm_cannot_flip_the_row_a_rerun_reopened(interrupted, personas, api_as):
    """Found in review: a worker past its lease confirmed the re-run attempt's pending row."""
    from reviewdesk.runs.host import DatabaseHost
    from reviewdesk.runs.models import Attempt

    run, _reconcile = interrupted
    effect = SideEffect.objects.get(run=run)
    stale_attempt = run.attempts.order_by("number").first()
    rerun_attempt = Attempt.objects.create(run=run, number=99, lease_epoch=99, expires_at=effect.created_at)
    SideEffect.objects.filter(pk=effect.pk).update(status="pending", attempt=rerun_attempt)
    DatabaseHost(run=run, attempt=stale_attempt).ledger.confirm(effect.idempotency_key, result={"late": True})
    effect.refresh_from_db()
    assert (effect.status, effect.result) == ("pending", None)


# --- The frozen-worker window ---------------------------------------------------------------
@pytest.fixture
def stale_attempt(interrupted):
    """The attempt that wrote `pending` and then stalled, as the ledger records it."""
    run, reconcile = interrupted
    attempt = run.attempts.order_by("number").first()
    SideEffect.objects.filter(run=run).update(attempt=attempt)
    return run, reconcile, attempt


def test_a_rerun_is_refused_while_the_stale_attempt_may_still_act_and_says_from_when(
    stale_attempt, personas, api_as, mailoutbox, settings
):
    """A frozen worker could wake and perform the effect: the re-run waits for its hard time limit."""
    run, reconcile, attempt = stale_attempt
    possible_at = attempt.started_at + timedelta(seconds=settings.CELERY_TASK_TIME_LIMIT)

    response = answer(api_as, personas.bob, reconcile, verdict="rerun", reason="not in the SMTP log")

    assert response.status_code == 409, response.json()
    body = response.json()
    assert body["code"] == "rerun_too_early"
    assert body["errors"] == {"possible_at": possible_at.isoformat()}
    assert possible_at.isoformat() in body["detail"]
    reconcile.refresh_from_db()
    assert reconcile.status == "pending" and not Decision.objects.filter(request=reconcile).exists()
    assert SideEffect.objects.get(run=run).status == "unknown"
    assert finish(run).status == RunStatus.INPUT_REQUIRED and mailoutbox == []


def test_a_rerun_is_signed_once_the_stale_attempts_task_is_past_its_hard_time_limit(
    stale_attempt, personas, api_as, mailoutbox
):
    run, reconcile, attempt = stale_attempt
    past_the_hard_time_limit(run, attempt)

    response = answer(api_as, personas.bob, reconcile, verdict="rerun")

    assert response.status_code == 201, response.json()
    assert finish(run).status == RunStatus.SUCCEEDED and len(mailoutbox) == 1


def test_marking_the_effect_done_does_not_wait_for_the_stale_attempt(stale_attempt, personas, api_as):
    _, reconcile, _ = stale_attempt

    response = answer(api_as, personas.bob, reconcile, verdict="confirm", external_ref="smtp-queue-1")

    assert response.status_code == 201, response.json()


# --- A re-run of a quorum tool's effect -------------------------------------------------------
# `execute` needs two reviewers; the command leaves a line in the run's directory each time it runs.
LOGGED_EXECUTE_SCRIPT = [
    {"tool_calls": [{"name": "execute", "arguments": {"command": "echo ran >> effects.log"}}]},
    {"content": "Ran it."},
]


def times_executed(run) -> int:
    from django.conf import settings

    log = Path(settings.DESK_RUNS_DIR) / str(run.id) / "effects.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


@pytest.fixture
def interrupted_execute(interrupted_run, personas):
    """`execute` approved by alice and bob, then its worker 'died' after writing pending, long enough
    ago that a re-run may be signed."""
    run, approval = interrupted_run(script=LOGGED_EXECUTE_SCRIPT)
    assert approval.required_approvals == 2
    approval_decide(
        approval_id=approval.id,
        reviewer=personas.alice,
        verdict="approve",
        checkpoint_id=str(approval.checkpoint_id),
    )
    approved_then_left_pending(run, approval, personas.bob)
    run = finish(run)
    assert run.status == RunStatus.INPUT_REQUIRED
    reconcile = ApprovalRequest.objects.get(run=run, kind="reconcile", status="pending")
    past_the_hard_time_limit(run)
    assert times_executed(run) == 0
    return run, reconcile


def test_one_reviewers_rerun_of_a_quorum_tools_effect_leaves_it_waiting_and_runs_nothing(
    interrupted_execute, personas, api_as
):
    run, reconcile = interrupted_execute

    response = answer(api_as, personas.bob, reconcile, verdict="rerun", reason="not in the shell history")

    assert response.status_code == 201, response.json()
    reconcile.refresh_from_db()
    assert reconcile.status == "pending"
    assert approval_data(reconcile)["quorum"] == {"required": 2, "approved_by": ["bob"], "groups": []}
    run = finish(run)
    assert run.status == RunStatus.INPUT_REQUIRED
    assert times_executed(run) == 0
    assert SideEffect.objects.get(run=run).status == "unknown"


def test_two_reviewers_reruns_of_a_quorum_tools_effect_run_it_exactly_once(
    interrupted_execute, personas, api_as
):
    run, reconcile = interrupted_execute

    for reviewer in (personas.bob, personas.alice):
        response = answer(api_as, reviewer, reconcile, verdict="rerun")
        assert response.status_code == 201, response.json()

    reconcile.refresh_from_db()
    assert reconcile.status == "approved"
    run = finish(run)
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert times_executed(run) == 1
    assert SideEffect.objects.get(run=run).status == "confirmed"
    assert all(d.consumed_at for d in Decision.objects.filter(request=reconcile))
    assert finish(run).status == RunStatus.SUCCEEDED and times_executed(run) == 1


def test_the_same_reviewer_cannot_cast_both_rerun_votes(interrupted_execute, personas, api_as):
    _, reconcile = interrupted_execute
    answer(api_as, personas.bob, reconcile, verdict="rerun")

    response = answer(api_as, personas.bob, reconcile, verdict="rerun")

    assert response.status_code == 409 and response.json()["code"] == "voted"
    assert Decision.objects.filter(request=reconcile).count() == 1


def test_marking_a_quorum_tools_effect_done_takes_one_reviewer_and_runs_nothing(
    interrupted_execute, personas, api_as
):
    """Confirming runs nothing (the result the reviewer recorded is used), like a rejection,
    which under a quorum also takes one reviewer: the quorum guards making an effect happen."""
    run, reconcile = interrupted_execute

    response = answer(api_as, personas.bob, reconcile, verdict="confirm", external_ref="ran by hand")

    assert response.status_code == 201, response.json()
    run = finish(run)
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert times_executed(run) == 0


def test_the_gate_wants_the_tools_quorum_for_a_rerun_whatever_the_row_says(
    interrupted_execute, personas, api_as
):
    """Someone lowers the reconciliation's quorum in the database and marks it approved after
    one re-run vote: the tool still wants two reviewers' signatures, and nothing runs."""
    run, reconcile = interrupted_execute
    answer(api_as, personas.bob, reconcile, verdict="rerun")
    ApprovalRequest.objects.filter(pk=reconcile.pk).update(required_approvals=1, status="approved")
    Run.objects.filter(pk=run.pk).update(status=RunStatus.QUEUED)  # as the decide service would

    run = finish(run)

    assert (run.status, run.error_kind) == (RunStatus.FAILED, "approval")
    assert "needs approvals from 2 different reviewers; it has 1" in run.error
    assert times_executed(run) == 0
    assert SideEffect.objects.get(run=run).status == "unknown"
