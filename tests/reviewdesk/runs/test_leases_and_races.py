"""Leases, expiry and races, on the real database with real threads.

The fences themselves, each with its negative control, are in test_fences.py.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection, connections
from django.utils import timezone

from agents.registry import Agent, get_agent, register
from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.approvals.lifecycle.expiry import approvals_expire
from reviewdesk.approvals.models import ApprovalRequest
from reviewdesk.lib.errors import DeskError
from reviewdesk.runs.claim import run_claim
from reviewdesk.runs.execution import run_execute
from reviewdesk.runs.models import Run, RunStatus, SideEffect
from reviewdesk.runs.services import run_submit

pytestmark = pytest.mark.django_db(transaction=True)


def expire_lease(run: Run) -> None:
    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))


def queued_run(personas, script=None) -> Run:
    from tests.conftest import SEND_EMAIL_SCRIPT

    return run_submit(
        submitter=personas.carol,
        agent="demo",
        input="go",
        model={"provider": "scripted", "script": script or SEND_EMAIL_SCRIPT},
    )


def in_threads(*calls):
    """Run the calls at the same moment in threads; return their results or exceptions."""
    barrier = threading.Barrier(len(calls))
    results: list = [None] * len(calls)

    def body(i, call):
        try:
            barrier.wait()
            results[i] = call()
        except Exception as exc:  # reported to the test, not lost in the thread
            results[i] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=body, args=(i, c)) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results


# --- leases ---------------------------------------------------------------------------


def test_the_lease_is_renewed_while_the_worker_holds_the_run(personas, settings):
    from reviewdesk.runs.leases import LeaseKeeper

    settings.DESK_LEASE_SECONDS = 1
    run = queued_run(personas)
    attempt = run_claim(run_id=run.id, worker="w")
    first = Run.objects.get(pk=run.pk).lease_expires_at
    with LeaseKeeper(attempt, cancel_epoch=0) as keeper:
        renewed = wait_until(lambda: Run.objects.get(pk=run.pk).lease_expires_at > first)
    assert renewed
    # Leaving the keeper waits for a renewal under way: the last one's outcome is final here.
    assert not keeper.lost.is_set()


def test_a_run_under_a_live_lease_cannot_be_claimed_by_a_second_claim(personas):
    """A duplicate of the task (a redelivery, the sweeper, a double decision) claims a run
    whose worker still holds a live lease: it gets nothing, and the live worker keeps the run,
    its epoch and its attempt. The claim's one-statement path takes queued runs only, so this
    is the locked read's "the lease has expired" comparison."""
    run = queued_run(personas)
    live = run_claim(run_id=run.id, worker="live")
    assert live is not None
    held = Run.objects.values("status", "lease_epoch", "lease_expires_at").get(pk=run.pk)
    assert held["lease_expires_at"] > timezone.now()

    assert run_claim(run_id=run.id, worker="duplicate") is None

    assert Run.objects.values("status", "lease_epoch", "lease_expires_at").get(pk=run.pk) == held
    assert [(a.worker, a.status) for a in run.attempts.order_by("number")] == [("live", "running")]

    expire_lease(run)  # control: the same claim takes the run once the lease has expired
    taken = run_claim(run_id=run.id, worker="duplicate")
    assert taken is not None and taken.lease_epoch == live.lease_epoch + 1


def test_a_poison_run_is_failed_after_its_workers_die_too_often(personas, settings):
    settings.DESK_MAX_LOST_ATTEMPTS = 3
    run = queued_run(personas)
    for _ in range(3):
        assert run_claim(run_id=run.id, worker="dies") is not None
        expire_lease(run)
    assert run_claim(run_id=run.id, worker="next") is None
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert "died 3 times" in run.error
    assert [a.status for a in run.attempts.all()] == ["lost"] * 3


def test_a_retry_after_its_workers_died_too_often_gets_a_fresh_count_of_deaths(personas, settings):
    from reviewdesk.runs.services import run_retry

    settings.DESK_MAX_LOST_ATTEMPTS = 3
    run = queued_run(personas)
    for _ in range(3):
        assert run_claim(run_id=run.id, worker="dies") is not None
        expire_lease(run)
    assert run_claim(run_id=run.id, worker="next") is None  # gave up: failed
    run_retry(run_id=run.id, user=personas.carol)
    # The retry's first worker dies once: one death in a row, not four.
    assert run_claim(run_id=run.id, worker="dies again") is not None
    expire_lease(run)
    assert run_claim(run_id=run.id, worker="after the retry") is not None
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING


def test_a_task_out_of_time_hands_its_run_to_a_new_attempt_with_what_it_did(personas, monkeypatch):
    """Celery raises SoftTimeLimitExceeded in a task a minute before its hard kill. That is
    the worker's clock running out, not a bug in the run: the steps done so far are kept and
    the run goes on in a new attempt, as after a dead worker, instead of failing as an
    internal error."""
    from celery.exceptions import SoftTimeLimitExceeded

    from reviewdesk.runs.execution import _LeaseCheckedProvider
    from reviewdesk.runs.models import Message

    script = [
        {"tool_calls": [{"name": "lookup_customer", "arguments": {"email": "ada@example.com"}}]},
        {"content": "Found her."},
    ]
    run = queued_run(personas, script)
    complete, calls = _LeaseCheckedProvider.complete, []

    def out_of_time_at_the_second_call(self, messages, tools):
        calls.append(len(messages))
        if len(calls) == 2:
            raise SoftTimeLimitExceeded()
        return complete(self, messages, tools)

    monkeypatch.setattr(_LeaseCheckedProvider, "complete", out_of_time_at_the_second_call)
    assert run_execute(run_id=run.id, worker="slow") is None
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED, run.error
    assert [a.status for a in run.attempts.all()] == ["lost"]
    assert Message.objects.filter(run=run, role="tool").count() == 1  # the lookup's result is kept

    run_execute(run_id=run.id, worker="next")
    run.refresh_from_db()
    assert (run.status, run.output) == (RunStatus.SUCCEEDED, "Found her.")
    assert calls == [2, 4, 4]  # the lookup was not asked for again


def test_a_run_whose_attempts_keep_running_out_of_time_fails_like_one_whose_workers_die(
    personas, monkeypatch, settings
):
    from celery.exceptions import SoftTimeLimitExceeded

    from reviewdesk.runs.execution import _LeaseCheckedProvider

    def out_of_time(self, messages, tools):
        raise SoftTimeLimitExceeded()

    settings.DESK_MAX_LOST_ATTEMPTS = 2
    monkeypatch.setattr(_LeaseCheckedProvider, "complete", out_of_time)
    run = queued_run(personas)
    run_execute(run_id=run.id, worker="slow")
    assert Run.objects.get(pk=run.pk).status == RunStatus.QUEUED
    run_execute(run_id=run.id, worker="slow again")
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and "2 times in a row" in run.error
    assert [a.status for a in run.attempts.all()] == ["lost", "lost"]


# --- races ----------------------------------------------------------------------------


def test_the_same_resume_delivered_twice_at_once_sends_one_email(personas, interrupted_run, mailoutbox):
    run, approval = interrupted_run()
    approval_decide(
        approval_id=approval.id,
        reviewer=personas.alice,
        verdict="approve",
        checkpoint_id=str(approval.checkpoint_id),
    )
    results = in_threads(
        lambda: run_execute(run_id=run.id, worker="a"), lambda: run_execute(run_id=run.id, worker="b")
    )
    assert sum(r is not None and not isinstance(r, Exception) for r in results) == 1, results
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert SideEffect.objects.filter(run=run).count() == 1
    assert len(mailoutbox) == 1


def test_two_reviewers_deciding_at_once_one_wins(personas, interrupted_run):
    _, approval = interrupted_run()

    def decide(reviewer, verdict):
        return lambda: approval_decide(
            approval_id=approval.id,
            reviewer=reviewer,
            verdict=verdict,
            checkpoint_id=str(approval.checkpoint_id),
        )

    results = in_threads(decide(personas.alice, "approve"), decide(personas.bob, "reject"))
    wins = [r for r in results if not isinstance(r, Exception)]
    losses = [r for r in results if isinstance(r, DeskError)]
    assert len(wins) == 1 and len(losses) == 1, results
    assert losses[0].status == 409


def _hold_then(lock_taken: threading.Event, first, then):
    """Run `first` inside a transaction that holds the run lock until the other side is seen
    waiting for it, then `then`. On PostgreSQL the wait is observed (the other backend blocked
    by this one), so the race below is the one named, not a late arrival. SQLite serialises
    writing transactions and shows no waiter: there the outcome must hold in whichever order
    it admits the two."""
    from django.db import transaction

    def body():
        with transaction.atomic():
            result = first()
            lock_taken.set()
            if connection.vendor == "postgresql":
                assert wait_until(another_backend_waits_on_me, seconds=10), "the other side never waited"
            return then(result)

    return body


def another_backend_waits_on_me() -> bool:
    """Whether a PostgreSQL backend is blocked by a lock this thread's connection holds."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pg_backend_pid() = ANY (pg_blocking_pids(pid)))"
        )
        return bool(cursor.fetchone()[0])


def wait_until(predicate, seconds: float = 5.0) -> bool:
    """Whether `predicate()` holds within `seconds`, asked every 20 ms."""
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_a_decision_holding_the_lock_beats_the_expiry_waiting_for_it(personas, interrupted_run):
    """The review found the earlier random race never raced; here each side holds the lock in turn."""
    from reviewdesk.approvals.deciding.checks import approval_check_decide
    from reviewdesk.approvals.deciding.input import DecisionInput
    from reviewdesk.approvals.deciding.record import approval_do_decide

    _run, approval = interrupted_run()
    taken = threading.Event()

    def check():
        return approval_check_decide(
            approval_id=approval.id,
            reviewer=personas.alice,
            decision=DecisionInput(verdict="approve", checkpoint_id=str(approval.checkpoint_id)),
        )

    def do(locked):
        locked_approval, locked_run = locked
        return approval_do_decide(
            approval=locked_approval,
            run=locked_run,
            reviewer=personas.alice,
            decision=DecisionInput(verdict="approve", checkpoint_id=str(locked_approval.checkpoint_id)),
        )

    def expire_once_the_lock_is_held():
        taken.wait(5)
        return approvals_expire(now=approval.expires_at + timedelta(seconds=1))

    decided, expired = in_threads(_hold_then(taken, check, do), expire_once_the_lock_is_held)
    approval.refresh_from_db()
    assert not isinstance(decided, Exception), decided
    assert (expired, approval.status) == (0, "approved")


def test_an_expiry_holding_the_lock_beats_the_decision_waiting_for_it(personas, interrupted_run):
    run, approval = interrupted_run()
    ApprovalRequest.objects.filter(pk=approval.pk).update(
        expires_at=timezone.now() + timedelta(milliseconds=100)
    )
    taken = threading.Event()

    def lock_run():
        threading.Event().wait(0.15)  # past expires_at
        return Run.objects.select_for_update().get(pk=run.pk)

    def expire(_):
        return approvals_expire(now=timezone.now())

    def decide_once_the_lock_is_held():
        taken.wait(5)
        return approval_decide(
            approval_id=approval.id,
            reviewer=personas.alice,
            verdict="approve",
            checkpoint_id=str(approval.checkpoint_id),
        )

    expired, decided = in_threads(_hold_then(taken, lock_run, expire), decide_once_the_lock_is_held)
    approval.refresh_from_db()
    assert expired == 1 and approval.status == "expired"
    assert isinstance(decided, DeskError) and decided.status == 410


# --- expiry policy ---------------------------------------------------------------------


def test_an_expired_approval_is_told_to_the_model_and_the_run_goes_on(personas, interrupted_run):
    run, approval = interrupted_run()
    ApprovalRequest.objects.filter(pk=approval.pk).update(expires_at=timezone.now())
    assert approvals_expire(now=timezone.now()) == 1
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED
    run_execute(run_id=run.id)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    tool_results = [m.body["content"] for m in run.messages.all() if m.role == "tool"]
    assert any("expired" in content for content in tool_results)
    assert not SideEffect.objects.filter(run=run, tool="send_email").exists()


def test_an_agent_whose_policy_is_fail_ends_the_run_when_an_approval_expires(personas):
    demo = get_agent("demo")
    register(Agent(name="strict", system_prompt="", tools=demo.tools, on_approval_expired="fail"))
    from tests.conftest import SEND_EMAIL_SCRIPT

    run = run_submit(
        submitter=personas.carol,
        agent="strict",
        input="go",
        model={"provider": "scripted", "script": SEND_EMAIL_SCRIPT},
    )
    run_execute(run_id=run.id)
    ApprovalRequest.objects.filter(run=run).update(expires_at=timezone.now())
    approvals_expire(now=timezone.now())
    run.refresh_from_db()
    assert (run.status, run.error_kind) == (RunStatus.FAILED, "approval_expired")


def test_an_idempotent_effect_an_earlier_attempt_left_pending_is_confirmed_by_the_one_that_ran_it(
    personas, mailoutbox, interrupted_run
):
    """An idempotent external call is safe to try again under its key, so a `pending` row a
    dead attempt left is tried again, not put to a human. The new attempt takes the row as its
    own: its confirm updated only its own attempt's rows, and the row stayed `pending` for good
    (a later retry to that point would have sent it again)."""
    from dataclasses import replace

    from agents.tools import Effect
    from tests.reviewdesk.runs.test_reconcile import approved_then_left_pending

    demo = get_agent("demo")
    tools = tuple(
        replace(tool, effect=Effect.IDEMPOTENT_EXTERNAL) if tool.name == "send_email" else tool
        for tool in demo.tools
    )
    register(Agent(name="idempotent-mail", system_prompt="", tools=tools))
    run, approval = interrupted_run(agent="idempotent-mail")
    approved_then_left_pending(run, approval, personas.alice, attempt=run.attempts.order_by("number").first())
    run_execute(run_id=run.id)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
    effect = SideEffect.objects.get(run=run)
    assert effect.status == "confirmed" and len(mailoutbox) == 1
    assert effect.attempt == run.attempts.order_by("-number").first()
