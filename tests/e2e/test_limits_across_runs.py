"""A refund limit per order holds across runs, on real processes: the API, a Celery worker
consuming from Redis, the database. The attack of issue 34: three runs refunding 100, 100 and
50 on order A-1001 (limit 100) all went through with no human; now the second and third wait."""

from __future__ import annotations

import pytest

from reviewdesk.accounts.services import token_create
from reviewdesk.demo.models import DemoRefund
from tests.e2e.conftest import http, wait_for_run

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def submit_refund(stack, token: str, amount: int) -> str:
    script = [
        {"tool_calls": [{"name": "refund_payment", "arguments": {"order_id": "A-1001", "amount": amount}}]},
        {"content": "Refunded."},
    ]
    status, run = http(
        "POST",
        stack.url + "/api/v1/runs",
        token=token,
        body={
            "agent": "demo",
            "input": f"Refund {amount} on A-1001.",
            "model": {"provider": "scripted", "script": script},
        },
    )
    assert status == 201, run
    return run["id"]


def test_three_runs_splitting_a_refund_on_one_order_ask_a_human_from_the_second(live_stack, personas):
    _, carol = token_create(user=personas.carol, scopes=["submit"])
    finished = []
    for amount in (100, 100, 50):
        run_id = submit_refund(live_stack, carol, amount)
        finished.append(wait_for_run(live_stack, carol, run_id, "succeeded", "input_required", "failed"))

    assert [run["status"] for run in finished] == ["succeeded", "input_required", "input_required"]
    assert [str(r.amount) for r in DemoRefund.objects.filter(order_id="A-1001")] == ["100.00"]
    _, alice = token_create(user=personas.alice, scopes=["review"])
    for run in finished[1:]:
        status, page = http("GET", f"{live_stack.url}/api/v1/approvals?run={run['id']}", token=alice)
        assert status == 200, page
        assert [(a["tool"], a["status"]) for a in page["results"]] == [("refund_payment", "pending")]
