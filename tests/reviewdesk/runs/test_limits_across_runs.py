"""A limit per order holds across runs, on the real host: the database, the ledger, the gate.

In-process (the runs execute in this process's threads, as a worker would run them), on a
real database: PostgreSQL's row lock or SQLite's IMMEDIATE transactions keep the policy's
read and the refund it allows together.
"""

from __future__ import annotations

import contextlib
import threading
from decimal import Decimal

import pytest

from reviewdesk.demo.models import DemoOrder, DemoRefund
from reviewdesk.demo.world import DjangoDemoWorld
from reviewdesk.runs.execution import run_execute
from reviewdesk.runs.models import Run, RunStatus
from reviewdesk.runs.services import run_submit
from tests.reviewdesk.runs.test_leases_and_races import in_threads

pytestmark = pytest.mark.django_db(transaction=True)


def refund_run(personas, amount: int) -> Run:
    script = [
        {"tool_calls": [{"name": "refund_payment", "arguments": {"order_id": "A-1001", "amount": amount}}]},
        {"content": "Refunded."},
    ]
    return run_submit(
        submitter=personas.carol,
        agent="demo",
        input="Refund Ada.",
        model={"provider": "scripted", "script": script},
    )


def execute(run: Run) -> Run:
    run_execute(run_id=run.id, worker="in-process")
    run.refresh_from_db()
    return run


def test_three_runs_refunding_100_100_and_50_on_one_order_ask_a_human_from_the_second(personas):
    first, second, third = (execute(refund_run(personas, amount)) for amount in (100, 100, 50))

    assert first.status == RunStatus.SUCCEEDED, first.error
    assert (second.status, third.status) == (RunStatus.INPUT_REQUIRED, RunStatus.INPUT_REQUIRED)
    assert [str(r.amount) for r in DemoRefund.objects.all()] == ["100.00"]
    assert [a.arguments["amount"] for a in (second.approvals.get(), third.approvals.get())] == [100, 50]


@pytest.mark.parametrize("held_before", [False, True], ids=["first hold of the order", "order held before"])
def test_two_runs_refunding_60_each_at_the_same_moment_put_at_most_one_through(
    personas, monkeypatch, held_before
):
    """Both runs find 0 refunded when they start (their policy lets each 60 run); in the gate,
    each refund waits at a barrier after reading "what is left", so without the order's lock
    both would commit. With it, the second waits on the lock until the first commits, then
    its policy sees 60 refunded and asks a human. The order's row is made the first time it is
    held (the two makers queue on its key) or is there already (only the row lock holds)."""
    if held_before:
        DemoOrder.objects.create(order_id="A-1001")
    runs = [refund_run(personas, 60), refund_run(personas, 60)]
    arrived = threading.Barrier(2)
    refund = DjangoDemoWorld.refund

    def refund_when_both_have_read(self, **kwargs):
        with contextlib.suppress(threading.BrokenBarrierError):
            arrived.wait(timeout=3)  # the other run is blocked on the order's lock: time out
        return refund(self, **kwargs)

    monkeypatch.setattr(DjangoDemoWorld, "refund", refund_when_both_have_read)

    results = in_threads(*(lambda run=run: execute(run) for run in runs))

    assert not any(isinstance(r, Exception) for r in results), results
    assert sorted(r.status for r in results) == sorted([RunStatus.SUCCEEDED, RunStatus.INPUT_REQUIRED])
    assert sum(r.amount for r in DemoRefund.objects.all()) == Decimal(60)
    waiting = next(r for r in results if r.status == RunStatus.INPUT_REQUIRED)
    assert waiting.approvals.get().arguments == {"order_id": "A-1001", "amount": 60}
