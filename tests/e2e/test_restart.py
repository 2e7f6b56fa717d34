"""Restart every process in the middle of a run: the run resumes from the store."""

from __future__ import annotations

import pytest

from reviewdesk.accounts.services import token_create
from tests.e2e.conftest import get_run, http, outbox_for, start_stack, wait_for_run, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SCRIPT = [
    {
        "tool_calls": [
            {"name": "lookup_customer", "arguments": {"email": "ada@example.com"}},
            {
                "name": "send_email",
                "arguments": {"to": "ada@example.com", "subject": "Refund", "body": "Soon."},
            },
            {"name": "refund_payment", "arguments": {"order_id": "A-1001", "amount": 150}},
        ]
    },
    {"content": "Emailed and refunded."},
]


def approve(stack, token, approval) -> None:
    status, body = http(
        "POST",
        f"{stack.url}/api/v1/approvals/{approval['id']}/decision",
        token=token,
        body={"verdict": "approve", "checkpoint_id": approval["checkpoint_id"]},
    )
    assert status == 201, body


def test_a_run_survives_killing_every_process_mid_run(personas, redis_server, tmp_path):
    from reviewdesk.demo.models import DemoRefund

    _, carol = token_create(user=personas.carol, scopes=["submit"])
    _, alice = token_create(user=personas.alice, scopes=["review"])
    # Its own queue: only this test's processes may serve the run, so a
    # surviving worker from another test cannot make the restart look good.
    isolated = {"DESK_CELERY_QUEUE": f"restart-{tmp_path.name}"}
    first = start_stack(tmp_path, env_extra=isolated)
    try:
        status, run = http(
            "POST",
            first.url + "/api/v1/runs",
            token=carol,
            body={
                "agent": "demo",
                "input": "Refund Ada",
                "model": {"provider": "scripted", "script": SCRIPT},
            },
        )
        assert status == 201
        run = wait_for_run(first, carol, run["id"], "input_required")
        email, refund = sorted(run["approvals"], key=lambda a: a["tool_call_id"])
        approve(first, alice, email)
        wait_until(
            lambda: get_run(first, carol, run["id"])["side_effects"],
            timeout=30,
            what="the approved email to be sent while its sibling waits",
        )
        run = wait_for_run(first, carol, run["id"], "input_required")
    finally:
        first.kill()

    second = start_stack(tmp_path, env_extra=isolated)
    try:
        approve(second, alice, refund)
        run = wait_for_run(second, carol, run["id"], "succeeded", "failed")
    finally:
        second.stop()

    assert run["status"] == "succeeded", run["error"]
    assert sorted((e["tool"], e["status"]) for e in run["side_effects"]) == [
        ("refund_payment", "confirmed"),
        ("send_email", "confirmed"),
    ]
    assert len(outbox_for(run["id"])) == 1
    assert DemoRefund.objects.count() == 1
    assert [a["worker"].split("@")[0] for a in run["attempts"]] == [
        f"e2e-{first.url.rsplit(':', 1)[1]}",
        f"e2e-{first.url.rsplit(':', 1)[1]}",
        f"e2e-{second.url.rsplit(':', 1)[1]}",
    ]
