"""Every fence a stale worker meets, each with its negative control.

A fence test that only shows a stale write refused cannot tell a fence from a
broken write path. So each fence is tested twice over the same write: the
stale attempt is refused, and the attempt that owns the run is accepted. The
fences: the step's write (`DatabaseHost.write_unsaved` through `fence`), the
run's finish (`run_finish`), the ledger's confirm (a compare-and-set on the
pending row of this attempt), the lease renewal (`LeaseKeeper.renew`), and the
cancel epoch (in `fence` and in the renewal).

Stale and current attempts are made the way production makes them: the first
worker's lease expires and `run_claim` gives the run to a second worker.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.db import connection  # noqa: F401 - read by a skipif condition
from django.utils import timezone

from agents.gate import CallBinding
from agents.loop import Finished
from agents.state import AgentState
from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.approvals.models import ApprovalRequest
from reviewdesk.audit.models import AuditEvent
from reviewdesk.runs.claim import run_claim
from reviewdesk.runs.execution import run_execute, run_finish
from reviewdesk.runs.host import DatabaseHost, LeaseLost
from reviewdesk.runs.leases import LeaseKeeper
from reviewdesk.runs.models import Attempt, Checkpoint, Run, RunStatus, SideEffect
from reviewdesk.runs.services import run_cancel, run_submit
from tests.conftest import SEND_EMAIL_SCRIPT

pytestmark = pytest.mark.django_db


def expire_lease(run: Run) -> None:
    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))


def queued_run(personas) -> Run:
    return run_submit(
        submitter=personas.carol,
        agent="demo",
        input="go",
        model={"provider": "scripted", "script": SEND_EMAIL_SCRIPT},
    )


@pytest.fixture
def attempts(personas):
    """(run, stale, current): the stale attempt's lease expired and the run was claimed again."""
    run = queued_run(personas)
    stale = run_claim(run_id=run.id, worker="stale")
    expire_lease(run)
    current = run_claim(run_id=run.id, worker="current")
    assert current.lease_epoch == stale.lease_epoch + 1
    return run, stale, current


def host(attempt: Attempt) -> DatabaseHost:
    return DatabaseHost(run=attempt.run, attempt=attempt)


def commit_one_step(host: DatabaseHost) -> None:
    """A step committed, then written (the host keeps it until its next write: host.py)."""
    host.commit_step(
        checkpoint_id=str(uuid.uuid4()),
        state=AgentState(message_count=1),
        new_messages=[{"role": "system", "content": f"written by attempt {host.attempt.number}"}],
        raise_approvals=[],
    )
    host.write_unsaved()


# --- step commit ------------------------------------------------------------------------


def test_a_step_commit_from_an_attempt_that_lost_its_lease_is_refused(attempts):
    run, stale, _ = attempts
    with pytest.raises(LeaseLost):
        commit_one_step(host(stale))
    with pytest.raises(LeaseLost), host(stale).ledger.atomic():
        pass
    assert not run.messages.exists()
    assert not Checkpoint.objects.filter(run=run).exists()
    assert Attempt.objects.get(pk=stale.pk).status == Attempt.Status.LOST


def test_control_the_same_step_commit_from_the_attempt_holding_the_lease_is_written(attempts):
    run, _, current = attempts
    commit_one_step(host(current))
    assert [m.body["content"] for m in run.messages.all()] == ["written by attempt 2"]
    assert Checkpoint.objects.filter(run=run).count() == 1


# --- run finish ---------------------------------------------------------------------------


def test_a_finish_from_an_attempt_that_lost_its_lease_is_refused_and_audited(attempts):
    run, stale, _ = attempts
    assert run_finish(attempt=stale, outcome=Finished("late")) is False
    run.refresh_from_db()
    assert (run.status, run.output) == (RunStatus.RUNNING, None)
    rejected = AuditEvent.objects.get(action="attempt.stale_write_rejected", subject_id=str(run.id))
    assert rejected.data["attempt"] == stale.number


def test_control_the_same_finish_from_the_attempt_holding_the_lease_ends_the_run(attempts):
    run, _, current = attempts
    assert run_finish(attempt=current, outcome=Finished("done")) is True
    run.refresh_from_db()
    assert (run.status, run.output) == (RunStatus.SUCCEEDED, "done")
    assert Attempt.objects.get(pk=current.pk).status == Attempt.Status.RELEASED
    assert not AuditEvent.objects.filter(action="attempt.stale_write_rejected").exists()


# --- ledger confirm -----------------------------------------------------------------------


@pytest.fixture
def approved_email(interrupted_run, personas):
    """carol's run waits on send_email; alice approved it. Returns (run, approval, decision)."""
    run, approval = interrupted_run()
    decision = approval_decide(
        approval_id=approval.id,
        reviewer=personas.alice,
        verdict="approve",
        checkpoint_id=str(approval.checkpoint_id),
    )
    return run, approval, decision


def write_pending(attempt: Attempt, approval: ApprovalRequest, decision) -> str:
    """What the gate does before it runs an external effect: consume the decision, write pending."""
    binding = CallBinding(
        str(attempt.run_id), str(approval.checkpoint_id), approval.tool_call_id, approval.tool
    )
    ledger = host(attempt).ledger
    with ledger.atomic():
        assert ledger.consume(str(decision.id))
        ledger.record(
            binding.idempotency_key, binding=binding, status="pending", decision_id=str(decision.id)
        )
    return binding.idempotency_key


def test_a_frozen_workers_late_confirm_leaves_the_unknown_effect_to_the_reviewer(
    approved_email, personas, mailoutbox
):
    """The frozen-worker race, in one process: the worker wrote pending and stalled past its
    lease; the next attempt found the effect pending, marked it unknown and asked a human. The
    frozen worker wakes and confirms: the row stays unknown, and the reviewer's answer stands."""
    run, approval, decision = approved_email
    frozen = run_claim(run_id=run.id, worker="frozen")
    key = write_pending(frozen, approval, decision)
    expire_lease(run)

    run_execute(run_id=run.id, worker="the sweeper's pick")  # takes the run over
    run.refresh_from_db()
    assert run.status == RunStatus.INPUT_REQUIRED
    reconcile = ApprovalRequest.objects.get(run=run, kind="reconcile", status="pending")
    assert SideEffect.objects.get(idempotency_key=key).status == "unknown"

    host(frozen).ledger.confirm(key, result={"sent": True, "by": "the frozen worker"})

    effect = SideEffect.objects.get(idempotency_key=key)
    assert (effect.status, effect.result) == ("unknown", None)
    approval_decide(
        approval_id=reconcile.id,
        reviewer=personas.bob,
        verdict="confirm",
        external_ref="smtp-log-42",
        checkpoint_id=str(reconcile.checkpoint_id),
    )
    effect.refresh_from_db()
    assert (effect.status, effect.external_ref) == ("confirmed", "smtp-log-42")
    assert effect.result == {"reconciled": True, "external_ref": "smtp-log-42", "by": "bob"}
    run_execute(run_id=run.id, worker="after the reviewer")
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert mailoutbox == []  # nobody re-sent it: the reviewer said it happened


def test_a_late_confirm_cannot_flip_a_row_a_rerun_reopened_for_another_attempt(approved_email):
    """The other half of the compare-and-set: the row is pending again, but not this attempt's."""
    _, approval, decision = approved_email
    run = approval.run
    stale = run_claim(run_id=run.id, worker="stale")
    key = write_pending(stale, approval, decision)
    expire_lease(run)
    rerun = run_claim(run_id=run.id, worker="rerun")
    SideEffect.objects.filter(idempotency_key=key).update(attempt=rerun)  # as ledger.reopen leaves it

    host(stale).ledger.confirm(key, result={"late": True})

    effect = SideEffect.objects.get(idempotency_key=key)
    assert (effect.status, effect.result, effect.attempt_id) == ("pending", None, rerun.pk)


def test_control_the_attempt_that_wrote_pending_confirms_its_effect(approved_email):
    run, approval, decision = approved_email
    current = run_claim(run_id=run.id, worker="current")
    key = write_pending(current, approval, decision)

    host(current).ledger.confirm(key, result={"sent": True})

    effect = SideEffect.objects.get(idempotency_key=key)
    assert (effect.status, effect.result) == ("confirmed", {"sent": True})


# --- ledger resume_retry ------------------------------------------------------------------


@pytest.mark.parametrize("status", ["pending", "confirmed", "unknown"])
def test_a_resume_retry_leaves_a_row_that_is_not_retrying_alone(approved_email, status):
    """`resume_retry` flips only a `retrying` row back to pending: a row that is pending (a try
    under way), confirmed (it happened) or unknown (a human decides) is not this retry's to
    take, and the answer is False so the gate does not run the effect again."""
    run, approval, decision = approved_email
    attempt = run_claim(run_id=run.id, worker="w")
    key = write_pending(attempt, approval, decision)
    SideEffect.objects.filter(idempotency_key=key).update(status=status)
    before = SideEffect.objects.values("status", "attempt_id", "updated_at").get(idempotency_key=key)

    ledger = host(attempt).ledger
    with ledger.atomic():
        resumed = ledger.resume_retry(key)

    assert resumed is False
    assert SideEffect.objects.values("status", "attempt_id", "updated_at").get(idempotency_key=key) == before


def test_control_a_resume_retry_takes_a_retrying_row_for_this_attempt(approved_email):
    run, approval, decision = approved_email
    stale = run_claim(run_id=run.id, worker="stale")
    key = write_pending(stale, approval, decision)
    SideEffect.objects.filter(idempotency_key=key).update(status="retrying")
    expire_lease(run)
    current = run_claim(run_id=run.id, worker="current")

    ledger = host(current).ledger
    with ledger.atomic():
        assert ledger.resume_retry(key) is True

    effect = SideEffect.objects.get(idempotency_key=key)
    assert (effect.status, effect.attempt_id) == ("pending", current.pk)


# --- lease renewal ------------------------------------------------------------------------


def test_a_lease_renewal_from_an_attempt_that_lost_its_lease_is_refused(attempts):
    run, stale, _ = attempts
    held_until = Run.objects.get(pk=run.pk).lease_expires_at
    stale_until = Attempt.objects.get(pk=stale.pk).expires_at

    assert LeaseKeeper(stale, cancel_epoch=0).renew() is False

    assert Run.objects.get(pk=run.pk).lease_expires_at == held_until
    assert Attempt.objects.get(pk=stale.pk).expires_at == stale_until


def test_control_the_same_renewal_from_the_attempt_holding_the_lease_extends_it(attempts, settings):
    run, _, current = attempts
    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() + timedelta(seconds=1))
    settings.DESK_LEASE_SECONDS = 600

    assert LeaseKeeper(current, cancel_epoch=0).renew() is True

    later = timezone.now() + timedelta(seconds=590)
    assert Run.objects.get(pk=run.pk).lease_expires_at > later
    assert Attempt.objects.get(pk=current.pk).expires_at > later


# --- cancel epoch -------------------------------------------------------------------------
#
# Today every bump of cancel_epoch also moves the run out of `running` (cancel, or an
# expiry under the `fail` policy), so the status check would catch the stale worker as
# well. These tests bump the epoch alone, status and lease epoch untouched, so that only
# the cancel-epoch clause stands between the worker and the write.


def bump_cancel_epoch_only(run: Run) -> None:
    Run.objects.filter(pk=run.pk).update(cancel_epoch=run.cancel_epoch + 1)
    fresh = Run.objects.get(pk=run.pk)
    assert (fresh.status, fresh.cancel_epoch) == (RunStatus.RUNNING, run.cancel_epoch + 1)


def test_a_step_commit_from_before_a_cancel_is_refused_even_with_the_lease_still_held(attempts):
    run, _, current = attempts
    bump_cancel_epoch_only(current.run)
    assert Run.objects.get(pk=run.pk).lease_epoch == current.lease_epoch

    with pytest.raises(LeaseLost):
        commit_one_step(host(current))

    assert not run.messages.exists()


def test_control_the_same_step_commit_under_the_current_cancel_epoch_is_written(attempts):
    run, _, current = attempts
    bump_cancel_epoch_only(current.run)
    current.run = Run.objects.get(pk=run.pk)  # an attempt that began after the bump

    commit_one_step(host(current))

    assert run.messages.count() == 1


def test_a_finish_from_before_a_cancel_is_refused_even_with_the_lease_still_held(attempts):
    run, _, current = attempts
    bump_cancel_epoch_only(current.run)

    run_finish(attempt=current, outcome=Finished("late"))

    run.refresh_from_db()
    assert (run.status, run.output) == (RunStatus.RUNNING, None)
    assert AuditEvent.objects.filter(action="attempt.stale_write_rejected", subject_id=str(run.id)).exists()


def test_a_lease_renewal_from_before_a_cancel_is_refused(attempts):
    _, _, current = attempts
    bump_cancel_epoch_only(current.run)
    assert LeaseKeeper(current, cancel_epoch=0).renew() is False
    assert LeaseKeeper(current, cancel_epoch=1).renew() is True  # control: the current epoch renews


# --- the fences together --------------------------------------------------------------------


def test_negative_control_with_fencing_switched_off_the_stale_step_commit_goes_through(attempts, monkeypatch):
    """The fault-injection switch that turns fencing off: the stale attempt's own write path works,
    so the refusal above is the fence's doing."""
    monkeypatch.setenv("DESK_FAULT_INJECTION", "1")
    monkeypatch.setenv("DESK_FAULT_NO_FENCING", "1")
    run, stale, _ = attempts
    commit_one_step(host(stale))
    assert run.messages.count() == 1  # the bug the fencing tests would catch


def test_cancel_fences_out_the_worker_holding_the_run(personas, api_as):
    run = queued_run(personas)
    attempt = run_claim(run_id=run.id, worker="w")
    response = api_as(personas.carol, "submit").post(f"/api/v1/runs/{run.id}/cancel")
    assert response.status_code == 200, response.json()
    with pytest.raises(LeaseLost):
        commit_one_step(host(attempt))
    assert LeaseKeeper(attempt, cancel_epoch=0).renew() is False
    assert Attempt.objects.get(pk=attempt.pk).status == Attempt.Status.CANCELLED


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif("connection.vendor != 'postgresql'", reason="SQLite serialises every writer")
def test_a_cancel_waits_for_the_step_write_that_fenced_the_run_then_fences_the_next_one_out(personas):
    """The fence holds the run row to the step's commit: a cancel arriving between the fence's
    check and the commit waits for it (PostgreSQL; two real connections). Without the lock the
    cancel would commit first and the step, checked before it, would land after it."""
    from tests.reviewdesk.lib.test_writers_lock import Holder, waits_for

    run = queued_run(personas)
    attempt = run_claim(run_id=run.id, worker="w")
    worker = host(attempt)
    worker.commit_step(
        checkpoint_id=str(uuid.uuid4()),
        state=AgentState(message_count=1),
        new_messages=[{"role": "system", "content": "written before the cancel"}],
        raise_approvals=[],
    )

    def fenced_step_write():
        worker.fence()
        worker.write_unsaved_fenced()

    step = Holder(fenced_step_write)
    step.start()
    waits_for(step, lambda: run_cancel(run_id=run.id, user=personas.carol))

    assert step.error is None, step.error
    assert [m.body["content"] for m in run.messages.all()] == ["written before the cancel"]
    assert Run.objects.get(pk=run.pk).status == RunStatus.CANCELLED
    with pytest.raises(LeaseLost):
        commit_one_step(host(attempt))
