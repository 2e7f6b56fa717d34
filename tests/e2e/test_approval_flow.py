"""The walking skeleton, end to end: submit over HTTP, the approval arrives on a
reviewer's socket, the reviewer approves, a real Celery worker resumes the run,
the tool verifies the signed decision and sends one email."""

from __future__ import annotations

import json
import time

import pytest
from django.db import connection
from websockets.sync.client import connect

from reviewdesk.accounts.services import token_create
from reviewdesk.audit.verification import audit_verify
from tests.conftest import SEND_EMAIL_SCRIPT
from tests.e2e.conftest import http, outbox_for, session_cookie, wait_for_run, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def next_event(ws, predicate, *, timeout: float = 20) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError("expected event did not arrive")
        message = json.loads(ws.recv(timeout=remaining))
        if predicate(message):
            return message


def test_one_approval_end_to_end(live_stack, personas, report_timing):
    _, carol = token_create(user=personas.carol, scopes=["submit"])
    _, alice = token_create(user=personas.alice, scopes=["review"])
    with connect(
        live_stack.ws_url,
        additional_headers={"Cookie": session_cookie(personas.alice), "Origin": live_stack.url},
        open_timeout=10,
    ) as ws:
        snapshot = json.loads(ws.recv(timeout=10))
        assert snapshot["type"] == "snapshot"

        submitted_at = time.monotonic()
        status, run = http(
            "POST",
            live_stack.url + "/api/v1/runs",
            token=carol,
            body={
                "agent": "demo",
                "input": "Tell Ada her refund is on its way.",
                "model": {"provider": "scripted", "script": SEND_EMAIL_SCRIPT},
            },
            headers={"Idempotency-Key": "e2e-submit-1"},
        )
        assert status == 201, run
        created = next_event(ws, lambda m: m["type"] == "approval.created" and m["data"]["run"] == run["id"])
        pushed_at = time.monotonic()
        approval = created["data"]
        assert approval["tool"] == "send_email"
        assert approval["arguments"] == SEND_EMAIL_SCRIPT[0]["tool_calls"][1]["arguments"]
        assert approval["reviewer"] == {"users": [], "targets": [], "group": "reviewers"}
        assert approval["expires_at"] and approval["status"] == "pending"

        decided_at = time.monotonic()
        status, decision = http(
            "POST",
            f"{live_stack.url}/api/v1/approvals/{approval['id']}/decision",
            token=alice,
            body={
                "verdict": "approve",
                "reason": "correct customer",
                "checkpoint_id": approval["checkpoint_id"],
            },
        )
        assert status == 201, decision
        next_event(
            ws,
            lambda m: (
                m["type"] == "run.updated"
                and m["data"]["id"] == run["id"]
                and m["data"]["status"] == "succeeded"
            ),
        )
        succeeded_at = time.monotonic()

    status, final = http("GET", f"{live_stack.url}/api/v1/runs/{run['id']}", token=carol)
    assert status == 200
    assert final["status"] == "succeeded", (final["error"], live_stack.logs())
    assert final["output"] == "Emailed Ada."
    assert [(e["tool"], e["status"]) for e in final["side_effects"]] == [("send_email", "confirmed")]
    assert [a["status"] for a in final["approvals"]] == ["approved"]
    assert final["approvals"][0]["decision"]["consumed_at"]
    emails = outbox_for(run["id"])
    assert len(emails) == 1 and "To: ada@example.com" in emails[0]
    assert audit_verify() == (True, None)

    backend = connection.vendor
    report_timing(f"[{backend}] submit -> approval on socket: {(pushed_at - submitted_at) * 1000:.0f} ms")
    report_timing(f"[{backend}] decision -> succeeded: {(succeeded_at - decided_at) * 1000:.0f} ms")


def test_a_repeated_submit_with_the_same_key_runs_once(live_stack, personas):
    _, carol = token_create(user=personas.carol, scopes=["submit"])
    body = {
        "agent": "demo",
        "input": "just answer",
        "model": {"provider": "scripted", "script": [{"content": "Hi."}]},
    }
    first = http(
        "POST", live_stack.url + "/api/v1/runs", token=carol, body=body, headers={"Idempotency-Key": "twice"}
    )
    again = http(
        "POST", live_stack.url + "/api/v1/runs", token=carol, body=body, headers={"Idempotency-Key": "twice"}
    )
    assert first[0] == again[0] == 201 and first[1]["id"] == again[1]["id"]

    run = wait_for_run(live_stack, carol, first[1]["id"])
    assert run["status"] == "succeeded" and run["output"] == "Hi."
    assert [a["number"] for a in run["attempts"]] == [1]


def test_an_openai_compatible_model_drives_the_run_through_the_worker(live_stack, personas, llm_server):
    from tests.llm_server import calls, text

    _, carol = token_create(user=personas.carol, scopes=["submit"])
    _, bob = token_create(user=personas.bob, scopes=["review"])
    email = {"to": "grace@example.com", "subject": "Hello", "body": "From the model."}
    llm_server.script(calls(("send_email", email)), text("Sent to Grace."))
    status, run = http(
        "POST",
        live_stack.url + "/api/v1/runs",
        token=carol,
        body={
            "agent": "demo",
            "input": "Email Grace",
            "model": {"provider": "openai", "name": "m", "stream": True},
        },
    )
    assert status == 201, run

    def pending():
        _, current = http("GET", f"{live_stack.url}/api/v1/runs/{run['id']}", token=carol)
        return current["approvals"] if current["status"] == "input_required" else None

    (approval,) = wait_until(pending, timeout=20, what="the approval", interval=0.1)
    assert approval["arguments"] == email
    status, _ = http(
        "POST",
        f"{live_stack.url}/api/v1/approvals/{approval['id']}/decision",
        token=bob,
        body={"verdict": "approve", "checkpoint_id": approval["checkpoint_id"], "note": "sign as Bob"},
    )
    assert status == 201

    final = wait_for_run(live_stack, carol, run["id"])
    assert final["status"] == "succeeded", final["error"]
    assert final["output"] == "Sent to Grace."
    assert len(outbox_for(run["id"])) == 1
    last_request = llm_server.requests[-1]
    assert last_request["stream"] is True
    assert "sign as Bob" in last_request["messages"][-1]["content"]
