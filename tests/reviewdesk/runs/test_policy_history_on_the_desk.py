"""The refund policy sees the run's earlier refunds on the real host (database, ledger, signing)."""

from __future__ import annotations

import pytest

from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.demo.models import DemoRefund
from reviewdesk.runs.execution import run_execute
from reviewdesk.runs.models import Run, RunStatus
from reviewdesk.runs.services import run_submit

pytestmark = pytest.mark.django_db


def refund(amount: int) -> dict:
    return {"tool_calls": [{"name": "refund_payment", "arguments": {"order_id": "A-1001", "amount": amount}}]}


def advance(run: Run) -> Run:
    run_execute(run_id=run.id, worker="in-process")
    run.refresh_from_db()
    return run


def test_refunds_of_100_100_and_50_on_one_order_need_approval_from_the_second(personas):
    run = run_submit(
        submitter=personas.carol,
        agent="demo",
        input="Refund Ada's order in three parts.",
        model={
            "provider": "scripted",
            "script": [refund(100), refund(100), refund(50), {"content": "Done."}],
        },
    )

    run = advance(run)
    assert run.status == RunStatus.INPUT_REQUIRED, run.error
    assert [str(r.amount) for r in DemoRefund.objects.order_by("id")] == ["100.00"]
    second = run.approvals.get()
    assert (second.tool_call_id, second.arguments["amount"]) == ("call_1_0", 100)

    approval_decide(
        approval_id=second.id,
        reviewer=personas.alice,
        verdict="approve",
        checkpoint_id=str(second.checkpoint_id),
    )
    run = advance(run)

    assert run.status == RunStatus.INPUT_REQUIRED, run.error
    third = run.approvals.get(status="pending")
    assert (third.tool_call_id, third.arguments["amount"]) == ("call_2_0", 50)
    assert [str(r.amount) for r in DemoRefund.objects.order_by("id")] == ["100.00", "100.00"]


EMAIL = {"to": "ada@example.com", "subject": "Refund", "body": "Refunded."}


def test_a_retry_from_an_earlier_checkpoint_still_counts_what_the_set_aside_branch_did(personas):
    """Going back does not undo a refund: the policy ("over 100 on one order in this run")
    counts the 90 the set-aside branch refunded, so the branch's own 90 asks a reviewer. It ran
    again with no one asked before (two refunds, 180, nobody's approval)."""
    from reviewdesk.runs.services import run_cancel, run_retry

    script = [refund(90), {"tool_calls": [{"name": "send_email", "arguments": EMAIL}]}, {"content": "Done."}]
    run = run_submit(
        submitter=personas.carol,
        agent="demo",
        input="Refund A-1001.",
        model={"provider": "scripted", "script": script},
    )
    run = advance(run)  # refunded 90 (nobody asked), then waits on the email
    assert run.status == RunStatus.INPUT_REQUIRED and DemoRefund.objects.count() == 1
    first = run.checkpoints.order_by("number").first()
    run_cancel(run_id=run.id, user=personas.carol)
    run = run_retry(run_id=run.id, user=personas.carol, checkpoint_id=str(first.id))
    run = advance(run)
    assert run.status == RunStatus.INPUT_REQUIRED, run.error
    assert run.approvals.filter(status="pending", tool="refund_payment").count() == 1
    assert DemoRefund.objects.count() == 1
