"""Deciding an external run's call: the desk's rules, its verdict list and edit schema, and a
signed payload that binds what a framework needs, verified with the keys /api/v1/keys serves."""

from __future__ import annotations

import base64
import hashlib
import json
from datetime import timedelta

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from django.contrib.auth.models import Group
from django.utils import timezone
from rest_framework.test import APIClient

from reviewdesk.accounts.roles import REVIEWERS, SUBMITTERS
from reviewdesk.approvals.lifecycle.expiry import approvals_expire
from reviewdesk.approvals.models import ApprovalRequest, Decision
from reviewdesk.runs.models import Run
from tests.conftest import make_user
from tests.reviewdesk.external.conftest import REFUND, args_sha256, call, submit_body

pytestmark = pytest.mark.django_db


def verified_payload(decision: dict) -> dict:
    """The decision's payload as a framework checks it: the desk's public key from the public
    /api/v1/keys (cryptography, not the desk's code), the signature over the exact bytes served
    in payload_b64, and those bytes parsed."""
    keys = APIClient().get("/api/v1/keys").json()["keys"]
    key = next(k for k in keys if k["key_id"] == decision["key_id"])
    public = Ed25519PublicKey.from_public_bytes(base64.b64decode(key["public_key"]))
    signed = base64.b64decode(decision["payload_b64"])
    public.verify(base64.b64decode(decision["signature"]), signed)  # raises if forged
    payload = json.loads(signed)
    assert payload == decision["payload"]
    return payload


def test_the_submitter_never_decides_even_holding_the_review_scope(submit, api_as, decide_api):
    """Four eyes: a service account in both groups, its token with both scopes."""
    sam = make_user("sam", SUBMITTERS, REVIEWERS)
    both = api_as(sam, "submit", "review")
    data = submit(client=both).json()
    approval_id = data["approvals"][0]["id"]
    response = decide_api(approval_id, client=both)
    assert response.status_code == 403
    assert "you submitted this run" in response.json()["detail"]
    assert ApprovalRequest.objects.get(pk=approval_id).status == "pending"
    assert not Decision.objects.exists()


def test_an_approval_is_signed_binding_the_framework_and_verifies_with_the_served_key(
    submitted, decide_api, task_queue
):
    data, approval_id = submitted()
    response = decide_api(approval_id, reason="fine by me")
    assert response.status_code == 201, response.json()
    payload = verified_payload(response.json())
    assert payload["audience"] == "carol"
    assert payload["external_id"] == "oa:thread-42"
    assert payload["external_checkpoint"] == "state-1"
    assert payload["reason_sha256"] == hashlib.sha256(b"fine by me").hexdigest()
    assert payload["run_id"] == data["run"]["id"] and payload["checkpoint_id"] == data["checkpoint_id"]
    assert payload["request_id"] == approval_id and payload["tool_call_id"] == "call_1"
    assert payload["arguments_sha256"] == args_sha256(REFUND)
    assert payload["attempt"] is None
    assert task_queue.length() == 0  # no resume: the framework resumes
    run = Run.objects.get(pk=data["run"]["id"])
    assert run.status == "running"


def test_the_decision_is_served_the_same_on_the_approval_and_on_a_repeated_submit(
    submitted, submit, decide_api, api_as, personas
):
    _, approval_id = submitted()
    decision = decide_api(approval_id).json()
    read = api_as(personas.alice, "review").get(f"/api/v1/approvals/{approval_id}").json()
    assert read["decision"]["payload_b64"] == decision["payload_b64"]
    assert read["external"]["framework"] == "openai-agents" and read["verdicts"] == [
        "approve",
        "reject",
        "edit",
    ]
    again = submit().json()["approvals"][0]
    assert again["status"] == "approved" and again["decision"]["payload_b64"] == decision["payload_b64"]


def test_a_reason_of_nothing_is_hashed_too(submitted, decide_api):
    _, approval_id = submitted()
    payload = verified_payload(decide_api(approval_id, "reject").json())
    assert payload["verdict"] == "reject"
    assert payload["reason_sha256"] == hashlib.sha256(b"").hexdigest()


def test_a_verdict_the_framework_cannot_carry_out_is_422_verdict(submitted, decide_api):
    _, approval_id = submitted(submit_body(call(schema=None)))
    response = decide_api(approval_id, "edit", arguments={"order_id": "1234", "amount": 10})
    assert response.status_code == 422
    assert response.json()["code"] == "verdict"
    assert ApprovalRequest.objects.get(pk=approval_id).status == "pending"


def test_an_edit_is_checked_against_the_submitted_schema(submitted, decide_api):
    _, approval_id = submitted()
    too_much = decide_api(approval_id, "edit", arguments={"order_id": "1234", "amount": 5000})
    assert too_much.status_code == 422
    assert any("amount" in error for error in too_much.json()["errors"])
    extra = decide_api(approval_id, "edit", arguments={"order_id": "1234", "amount": 5, "to": "me"})
    assert extra.status_code == 422
    edited = decide_api(approval_id, "edit", arguments={"order_id": "1234", "amount": 100})
    assert edited.status_code == 201, edited.json()
    body = edited.json()
    assert body["arguments"] == {"order_id": "1234", "amount": 100}
    payload = verified_payload(body)
    assert payload["arguments_sha256"] == args_sha256({"order_id": "1234", "amount": 100})


def test_a_quorum_needs_two_reviewers(submitted, decide_api, api_as, personas):
    data, approval_id = submitted(submit_body(call(required_approvals=2)))
    assert decide_api(approval_id).status_code == 201
    assert ApprovalRequest.objects.get(pk=approval_id).status == "pending"
    assert Run.objects.get(pk=data["run"]["id"]).status == "input_required"
    second = decide_api(approval_id, client=api_as(personas.bob, "review"))
    assert second.status_code == 201
    assert ApprovalRequest.objects.get(pk=approval_id).status == "approved"
    assert Run.objects.get(pk=data["run"]["id"]).status == "running"


def test_the_run_waits_while_any_of_its_calls_does(submitted, decide_api):
    data, first = submitted(submit_body(call("call_1"), call("call_2"), resume_policy="all_or_nothing"))
    second = data["approvals"][1]["id"]
    decide_api(first)
    assert Run.objects.get(pk=data["run"]["id"]).status == "input_required"
    decide_api(second, "reject", reason="no")
    assert Run.objects.get(pk=data["run"]["id"]).status == "running"


def test_an_expired_call_tells_the_framework_and_queues_nothing(submitted, task_queue):
    data, approval_id = submitted()
    ApprovalRequest.objects.filter(pk=approval_id).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert approvals_expire(now=timezone.now()) == 1
    assert ApprovalRequest.objects.get(pk=approval_id).status == "expired"
    assert Run.objects.get(pk=data["run"]["id"]).status == "running"
    assert task_queue.length() == 0


def test_an_internal_decision_keeps_its_payload_and_gains_payload_b64(interrupted_run, decide_api):
    _, approval = interrupted_run()
    body = decide_api(str(approval.id)).json()
    assert "audience" not in body["payload"] and "external_id" not in body["payload"]
    assert json.loads(base64.b64decode(body["payload_b64"])) == body["payload"]


def test_the_keys_are_public_and_say_which_signs_now():
    response = APIClient().get("/api/v1/keys")
    assert response.status_code == 200
    body = response.json()
    assert "pin" in body["warning"]
    active = [k for k in body["keys"] if k["status"] == "active"]
    assert len(active) == 1 and active[0]["alg"] == "Ed25519"
    assert len(base64.b64decode(active[0]["public_key"])) == 32


def test_a_group_named_by_the_submit_decides_and_others_do_not(submitted, decide_api, api_as, personas):
    finance = Group.objects.create(name="finance")
    personas.bob.groups.add(finance)
    _, approval_id = submitted(submit_body(reviewers=["group:finance"]))
    assert decide_api(approval_id).status_code == 404  # alice cannot even see it
    assert decide_api(approval_id, client=api_as(personas.bob, "review")).status_code == 201


def test_an_edit_is_refused_where_the_framework_lists_no_edit_even_with_a_schema(submitted, decide_api):
    """The OpenAI Agents SDK approves or rejects only: its adapter sends a schema, not edit."""
    data, approval_id = submitted(submit_body(call(verdicts=["approve", "reject"])))
    assert data["approvals"][0]["verdicts"] == ["approve", "reject"]
    response = decide_api(approval_id, "edit", arguments={"order_id": "1234", "amount": 10})
    assert response.status_code == 422 and response.json()["code"] == "verdict"
    assert ApprovalRequest.objects.get(pk=approval_id).status == "pending"


def test_a_reviewer_hands_an_external_call_over_and_the_colleague_decides(
    submitted, decide_api, api_as, personas
):
    _, approval_id = submitted(submit_body(reviewers=["alice"]))
    handed = api_as(personas.alice, "review").post(
        f"/api/v1/approvals/{approval_id}/handover", {"to": "bob", "note": "yours"}, format="json"
    )
    assert handed.status_code == 200, handed.json()
    assert decide_api(approval_id).status_code == 404  # alice: no longer hers to see
    assert decide_api(approval_id, client=api_as(personas.bob, "review")).status_code == 201
