"""A step the loop commits is kept and written at the host's next write (reviewdesk/runs/host.py).

In-process, on the test database, with the scripted model: what the database holds when a tool
runs, when the model is called, and when an attempt that lost its lease finishes. The timing
of the writes (fewer transactions) is the statement budget's (test_statement_budget.py).
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from agents.loop import Waiting
from agents.providers import provider_for
from agents.state import AgentState, CallState, CallStatus, Step
from reviewdesk.approvals.models import ApprovalRequest
from reviewdesk.audit.models import AuditEvent
from reviewdesk.demo.world import DjangoDemoWorld
from reviewdesk.runs import execution
from reviewdesk.runs.claim import run_claim
from reviewdesk.runs.execution import run_execute, run_finish
from reviewdesk.runs.host import DatabaseHost
from reviewdesk.runs.models import Checkpoint, Message, Run, RunStatus
from reviewdesk.runs.services import run_submit

pytestmark = pytest.mark.django_db

LOOKUP_THEN_ANSWER = [
    {"tool_calls": [{"name": "lookup_customer", "arguments": {"email": "ada@example.com"}}]},
    {"content": "Ada has two orders."},
]
EMAIL = {"to": "ada@example.com", "subject": "Hello", "body": "Hi."}
SMALL_REFUND = [
    {"tool_calls": [{"name": "refund_payment", "arguments": {"order_id": "A-1002", "amount": 10}}]},
    {"content": "Refunded."},
]


def submitted(personas, script) -> Run:
    return run_submit(
        submitter=personas.carol, agent="demo", input="go", model={"provider": "scripted", "script": script}
    )


def roles_written(run_id) -> list[str]:
    return list(
        Message.objects.filter(run_id=run_id, superseded_at__isnull=True)
        .order_by("position")
        .values_list("role", flat=True)
    )


class WatchingWorld(DjangoDemoWorld):
    """The demo world, noting what the run's log held when the refund ran."""

    seen: list[list[str]] = []

    def refund(self, *, order_id, amount, idempotency_key):
        run_id = idempotency_key.split(":")[0]
        WatchingWorld.seen.append(roles_written(run_id))
        return super().refund(order_id=order_id, amount=amount, idempotency_key=idempotency_key)


def test_the_model_turn_a_tool_runs_for_is_written_before_the_tool_runs(personas, settings):
    settings.DESK_TOOL_WORLD = "tests.reviewdesk.runs.test_kept_steps.WatchingWorld"
    WatchingWorld.seen = []
    run = submitted(personas, SMALL_REFUND)
    run_execute(run_id=run.id, worker="w")
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
    # The opening and the turn that asked for the refund, before the refund itself.
    assert WatchingWorld.seen == [["system", "user", "assistant"]]


def test_what_came_before_a_model_call_is_written_before_it_but_the_opening_waits(personas, monkeypatch):
    run = submitted(personas, LOOKUP_THEN_ANSWER)
    seen: list[list[str]] = []

    class Watching:
        def __init__(self, spec):
            self.scripted = provider_for(spec)

        def complete(self, messages, tools):
            seen.append(roles_written(run.id))
            return self.scripted.complete(messages, tools)

    monkeypatch.setattr(execution, "provider_for", lambda spec, **_: Watching(spec))
    run_execute(run_id=run.id, worker="w")
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
    # First call: nothing written yet (the opening is made again from the run if the worker dies).
    # Second call: the opening, the model's turn and the lookup's result, all written.
    assert seen == [[], ["system", "user", "assistant", "tool"]]
    assert roles_written(run.id) == ["system", "user", "assistant", "tool", "assistant"]


def test_a_run_waiting_for_approval_has_its_steps_written_with_its_end_and_its_request_raised(personas):
    run = submitted(personas, [{"tool_calls": [{"name": "send_email", "arguments": EMAIL}]}])
    run_execute(run_id=run.id, worker="w")
    run.refresh_from_db()
    assert run.status == RunStatus.INPUT_REQUIRED
    assert roles_written(run.id) == ["system", "user", "assistant"]
    approval = ApprovalRequest.objects.get(run=run)
    # The request names the checkpoint it was raised at, the run's latest.
    latest = Checkpoint.objects.filter(run=run).order_by("-number").first()
    assert str(approval.checkpoint_id) == str(latest.id)
    assert list(Checkpoint.objects.filter(run=run).order_by("number").values_list("number", flat=True)) == [
        1,
        2,
    ]


def kept_waiting_step(host: DatabaseHost) -> Waiting:
    """The loop's step that raises an approval, committed to the host (kept, not written)."""
    checkpoint_id = str(uuid.uuid4())
    call = CallState(
        id=f"call_{uuid.uuid4().hex[:6]}",
        name="send_email",
        arguments=EMAIL,
        status=CallStatus.AWAITING,
        checkpoint_id=checkpoint_id,
    )
    assistant = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": call.id, "type": "function", "function": {"name": "send_email", "arguments": "{}"}}
        ],
    }
    state = AgentState(step=Step.TOOLS, message_count=1, batch=[call], batch_message=assistant)
    host.commit_step(
        checkpoint_id=checkpoint_id, state=state, new_messages=[assistant], raise_approvals=[call]
    )
    return Waiting((call.id,))


def claimed_twice(personas) -> tuple[Run, DatabaseHost, DatabaseHost]:
    """(run, stale host, current host): the first attempt's lease expired and a second took it."""
    run = submitted(personas, [{"content": "unused"}])
    stale = run_claim(run_id=run.id, worker="stale")
    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    current = run_claim(run_id=run.id, worker="current")
    return run, DatabaseHost(run=stale.run, attempt=stale), DatabaseHost(run=current.run, attempt=current)


def test_a_finish_refused_for_a_lost_lease_writes_none_of_the_steps_it_kept(personas):
    run, stale, _ = claimed_twice(personas)
    outcome = kept_waiting_step(stale)
    run_finish(attempt=stale.attempt, outcome=outcome, host=stale)
    assert not Message.objects.filter(run=run).exists()
    assert not Checkpoint.objects.filter(run=run).exists()
    assert not ApprovalRequest.objects.filter(run=run).exists()
    assert AuditEvent.objects.filter(action="attempt.stale_write_rejected", subject_id=str(run.id)).exists()


def test_control_the_same_finish_from_the_attempt_holding_the_lease_writes_them_and_waits(personas):
    run, _, current = claimed_twice(personas)
    outcome = kept_waiting_step(current)
    run_finish(attempt=current.attempt, outcome=outcome, host=current)
    run.refresh_from_db()
    assert run.status == RunStatus.INPUT_REQUIRED
    assert roles_written(run.id) == ["assistant"]
    assert ApprovalRequest.objects.get(run=run).tool_call_id == outcome.call_ids[0]


def test_the_log_read_after_a_kept_step_holds_it_even_when_the_host_had_not_read_the_log(personas):
    run, _, current = claimed_twice(personas)
    kept_waiting_step(current)  # a host that never loaded: the log is read from the database
    assert [m["role"] for m in current.messages(1)] == ["assistant"]
    assert roles_written(run.id) == ["assistant"]


def test_a_kept_step_that_fails_to_be_written_fails_the_run_visibly_and_writes_nothing_of_it(
    personas, monkeypatch
):
    from reviewdesk.runs import host as host_module

    def broken_raise(**kwargs):
        raise RuntimeError("a routing rule that cannot be read")

    monkeypatch.setattr(host_module, "approval_raise", broken_raise)
    run = submitted(personas, [{"tool_calls": [{"name": "send_email", "arguments": EMAIL}]}])
    run_execute(run_id=run.id, worker="w")
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert run.error.startswith("internal error (incident ")
    assert run.lease_expires_at is None  # released: nothing waits for the lease to expire
    assert not Message.objects.filter(run=run).exists()  # the steps went with the failed write
    assert not ApprovalRequest.objects.filter(run=run).exists()


class Fickle:
    """A model that answers otherwise when asked again, as a real one may: "the answer" first,
    then a refund nobody asked it for."""

    calls = 0

    def __init__(self, spec, **_):
        pass

    def complete(self, messages, tools):
        from agents.providers import AssistantTurn
        from agents.providers.base import ToolCall

        Fickle.calls += 1
        if Fickle.calls == 1:
            return AssistantTurn(content="the answer")
        if not any(m.get("role") == "tool" for m in messages):
            refund = ToolCall(
                id="call_x", name="refund_payment", arguments='{"order_id": "A-1002", "amount": 10}'
            )
            return AssistantTurn(content=None, tool_calls=(refund,))
        return AssistantTurn(content="Refunded.")


def test_an_error_of_the_finish_itself_leaves_the_run_to_the_sweeper_which_finishes_it(personas, monkeypatch):
    """Not a kept step's write: the finish's own work failing once (a connection dropped). The
    model's answer, kept for the finish, is written on its own before the task fails, so the
    sweeper's attempt ends the run with it and never asks the model again (a helper's review:
    it asked again, and acted on a different answer)."""
    from django.db import OperationalError

    from reviewdesk.runs.models import SideEffect

    Fickle.calls = 0
    monkeypatch.setattr(execution, "provider_for", Fickle)
    run = submitted(personas, [{"content": "unused"}])
    emitted = execution.run_emit_updated
    calls = {"n": 0}

    def once_broken(r):
        calls["n"] += 1
        if calls["n"] == 1:  # the finish's (the claim's event is sent from runs/claim.py)
            raise OperationalError("server closed the connection unexpectedly")
        return emitted(r)

    monkeypatch.setattr(execution, "run_emit_updated", once_broken)
    with pytest.raises(OperationalError):
        run_execute(run_id=run.id, worker="w")
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING  # the task failed; the run keeps its lease until it expires
    assert roles_written(run.id)[-1] == "assistant"  # the answer is written all the same
    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    run_execute(run_id=run.id, worker="the sweeper's")
    run.refresh_from_db()
    assert (run.status, run.output) == (RunStatus.SUCCEEDED, "the answer")
    assert Fickle.calls == 1 and not SideEffect.objects.filter(run=run).exists()


def test_a_finish_that_fails_before_taking_the_kept_steps_writes_them_once(personas, monkeypatch):
    """The finish's transaction fails to begin (the database went away and came back): the
    steps it never took are written on their own, once, and the sweeper ends the run with them."""
    from contextlib import contextmanager

    from django.db import OperationalError

    Fickle.calls = 0
    monkeypatch.setattr(execution, "provider_for", Fickle)
    run = submitted(personas, [{"content": "unused"}])
    real = execution.atomic_appends_last
    opened = {"n": 0}

    @contextmanager
    def once_refused():
        opened["n"] += 1
        if opened["n"] == 1:  # the finish's (the claim opens its own in runs/claim.py)
            raise OperationalError("the database system is starting up")
        with real():
            yield

    monkeypatch.setattr(execution, "atomic_appends_last", once_refused)
    with pytest.raises(OperationalError):
        run_execute(run_id=run.id, worker="w")
    assert roles_written(run.id) == ["system", "user", "assistant"]
    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    run_execute(run_id=run.id, worker="the sweeper's")
    run.refresh_from_db()
    assert (run.status, run.output, Fickle.calls) == (RunStatus.SUCCEEDED, "the answer", 1)


def test_a_run_cancelled_before_its_first_model_call_never_calls_the_model(personas, monkeypatch):
    from reviewdesk.runs.services import run_cancel

    run = submitted(personas, [{"content": "done"}])
    calls: list[int] = []

    class Watching:
        def __init__(self, spec):
            self.scripted = provider_for(spec)

        def complete(self, messages, tools):
            calls.append(len(messages))
            return self.scripted.complete(messages, tools)

    def cancelled_meanwhile(spec, **_):
        run_cancel(run_id=run.id, user=personas.carol)  # between the claim and the model call
        return Watching(spec)

    monkeypatch.setattr(execution, "provider_for", cancelled_meanwhile)
    assert run_execute(run_id=run.id, worker="w") is None
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    assert calls == []


def test_a_run_cancelled_while_the_model_answers_records_no_outcome(personas, monkeypatch):
    """The model's final answer comes back after a cancel: the finish is refused as a stale
    write, run_execute returns None (no outcome was recorded), and the answer is not kept."""
    from reviewdesk.runs.services import run_cancel

    run = submitted(personas, [{"content": "too late"}])

    class CancelledMeanwhile:
        def __init__(self, spec):
            self.scripted = provider_for(spec)

        def complete(self, messages, tools):
            run_cancel(run_id=run.id, user=personas.carol)
            return self.scripted.complete(messages, tools)

    monkeypatch.setattr(execution, "provider_for", lambda spec, **_: CancelledMeanwhile(spec))
    assert run_execute(run_id=run.id, worker="w") is None
    run.refresh_from_db()
    assert (run.status, run.output) == (RunStatus.CANCELLED, None)
    assert "too late" not in [m.body.get("content") for m in run.messages.all()]
    assert AuditEvent.objects.filter(action="attempt.stale_write_rejected", subject_id=str(run.id)).exists()


class WorkerKilled(BaseException):
    """The worker dying in the middle of a tool (kill -9, in-process): no handler runs."""


class WatchedCustomers(dict):
    """The demo's customer data, noting each read; the first one dies when `die_once` is set."""

    def __init__(self, data, *, die_once: bool):
        super().__init__(data)
        self.reads, self.die_once = 0, die_once

    def get(self, key, default=None):
        if self.die_once:
            self.die_once = False
            raise WorkerKilled
        self.reads += 1
        return super().get(key, default)


def test_a_resumed_attempt_checks_it_owns_the_run_before_a_read_still_ready(personas, monkeypatch):
    """The worker died in a read-only call; the sweeper's attempt finds it still ready. The run
    was cancelled since that attempt's claim: the read does not run (nothing written before it
    fenced the run, and the read writes nothing), and the attempt records nothing."""
    from agents import demo
    from reviewdesk.runs.services import run_cancel

    customers = WatchedCustomers(demo.CUSTOMERS, die_once=True)
    monkeypatch.setattr(demo, "CUSTOMERS", customers)
    run = submitted(personas, LOOKUP_THEN_ANSWER)
    with pytest.raises(WorkerKilled):
        run_execute(run_id=run.id, worker="dies")
    assert roles_written(run.id) == ["system", "user", "assistant"]  # the call is in the log, ready
    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))

    def cancelled_meanwhile(spec, **_):
        run_cancel(run_id=run.id, user=personas.carol)  # between the sweeper's claim and the read
        return provider_for(spec)

    monkeypatch.setattr(execution, "provider_for", cancelled_meanwhile)
    assert run_execute(run_id=run.id, worker="the sweeper's") is None
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    assert customers.reads == 0, "the read ran for a cancelled run"
    assert AuditEvent.objects.filter(action="attempt.stale_write_rejected", subject_id=str(run.id)).exists()


def test_control_the_attempt_that_owns_the_run_runs_the_read_still_ready(personas, monkeypatch):
    from agents import demo

    customers = WatchedCustomers(demo.CUSTOMERS, die_once=True)
    monkeypatch.setattr(demo, "CUSTOMERS", customers)
    run = submitted(personas, LOOKUP_THEN_ANSWER)
    with pytest.raises(WorkerKilled):
        run_execute(run_id=run.id, worker="dies")
    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))

    run_execute(run_id=run.id, worker="the sweeper's")

    run.refresh_from_db()
    assert (run.status, run.output, customers.reads) == (RunStatus.SUCCEEDED, "Ada has two orders.", 1)
