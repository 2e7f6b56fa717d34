"""A database error under the turn loop (a lost connection, a lock that timed out) is a
transient failure: the run is retried with backoff, like a model server's hiccup, not failed as
an internal error. Nothing that acted on the world is done again: the ledger says what ran."""

from __future__ import annotations

import pytest
from django.db import InterfaceError, OperationalError, connection

from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.runs import host as host_module
from reviewdesk.runs.execution import run_execute
from reviewdesk.runs.models import Run, RunStatus, SideEffect

pytestmark = pytest.mark.django_db


@pytest.fixture
def approved_run(interrupted_run, personas):
    run, approval = interrupted_run()
    approval_decide(
        approval_id=approval.id,
        reviewer=personas.alice,
        verdict="approve",
        checkpoint_id=str(approval.checkpoint_id),
    )
    return run


def break_the_decision_read_once(monkeypatch, fail) -> None:
    """The resume's read of the call's decision meets `fail()` the first time only."""
    real = host_module.call_decision_read
    broken = {"left": 1}

    def once(**kwargs):
        if broken["left"]:
            broken["left"] -= 1
            fail()
        return real(**kwargs)

    monkeypatch.setattr(host_module, "call_decision_read", once)


def resume(run: Run) -> Run:
    run_execute(run_id=run.id, worker="in-process")
    run.refresh_from_db()
    return run


def due_now(run: Run) -> None:
    Run.objects.filter(pk=run.pk).update(next_attempt_at=None)


@pytest.mark.parametrize(
    "error",
    [
        OperationalError("server closed the connection unexpectedly"),
        InterfaceError("connection already closed"),
    ],
    ids=["operational", "interface"],
)
def test_a_database_error_in_the_loop_is_retried_as_transient_and_the_email_sent_once(
    approved_run, monkeypatch, mailoutbox, error
):
    def fail():
        raise error

    break_the_decision_read_once(monkeypatch, fail)

    run = resume(approved_run)

    assert (run.status, run.error_kind, run.retries) == (RunStatus.QUEUED, "transient", 1), run.error
    assert run.next_attempt_at is not None and type(error).__name__ in run.error
    assert "closed" not in run.error  # the driver's words stay in the log
    assert mailoutbox == []
    due_now(run)
    run = resume(run)
    assert (run.status, run.output) == (RunStatus.SUCCEEDED, "Emailed Ada."), run.error
    assert [m.subject for m in mailoutbox] == ["Your refund"]
    assert [a.status for a in run.attempts.all()] == ["released", "failed", "released"]


def test_the_same_database_error_twice_in_a_row_stops_the_retries(approved_run, monkeypatch, mailoutbox):
    """As for the model's transient errors: twice in a row, it is not transient after all."""

    def fail():
        raise OperationalError("no such column: approvals_decision.note")  # a schema out of date

    break_the_decision_read_once(monkeypatch, fail)
    due_now(resume(approved_run))
    break_the_decision_read_once(monkeypatch, fail)

    run = resume(approved_run)

    assert (run.status, run.error_kind, run.retries) == (RunStatus.FAILED, "transient", 1)
    assert mailoutbox == []


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_a_connection_the_server_dropped_under_the_loop_is_replaced_and_the_run_retried(
    approved_run, monkeypatch, mailoutbox
):
    """The server ends the worker's session (a restart, a failover, an admin) mid-loop: the run
    is queued again through a new connection, not left to a finish that fails on the dead one."""

    def terminate_own_session():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")

    break_the_decision_read_once(monkeypatch, terminate_own_session)

    run = resume(approved_run)

    assert (run.status, run.error_kind) == (RunStatus.QUEUED, "transient"), run.error
    assert not SideEffect.objects.filter(run=run).exists() and mailoutbox == []
    due_now(run)
    assert resume(run).status == RunStatus.SUCCEEDED
    assert len(mailoutbox) == 1
