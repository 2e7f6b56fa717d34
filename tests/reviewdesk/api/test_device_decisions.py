"""GET /api/v1/approvals/{id}/payload and a device-signed POST .../decision, with key files."""

from __future__ import annotations

import base64
import json

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agents.canonical import canonical_json, sha256_hex
from agents.trust import public_key_b64
from reviewdesk.accounts.devicekeys import DatabaseTrust
from reviewdesk.accounts.models import DeviceKey, Endorsement, Revocation
from reviewdesk.approvals.models import Decision
from reviewdesk.audit.models import AuditEvent
from tests.reviewdesk.device_keys import device_decide

pytestmark = pytest.mark.django_db


def test_the_payload_is_the_exact_bytes_to_sign(interrupted_run, personas, api_as, device_keys):
    _, approval = interrupted_run()
    response = api_as(personas.alice, "review").get(
        f"/api/v1/approvals/{approval.id}/payload",
        {
            "verdict": "approve",
            "checkpoint_id": str(approval.checkpoint_id),
            "key_id": device_keys.alice_key_id,
        },
    )
    assert response.status_code == 200, response.json()
    body = response.json()
    assert base64.b64decode(body["bytes"]) == canonical_json(body["payload"]) == body["canonical"].encode()
    payload = body["payload"]
    assert payload["version"] == 4 and "answer_sha256" in payload and payload["signer"] == "device"
    assert payload["key_id"] == device_keys.alice_key_id and payload["reviewer"] == "alice"
    assert payload["arguments_sha256"] == approval.arguments_sha256
    assert not Decision.objects.exists()  # nothing stored


@pytest.mark.parametrize("field", ["arguments", "answer"])
def test_json_in_the_query_nested_past_the_decoder_is_422_never_a_500(
    interrupted_run, personas, api_as, device_keys, field
):
    """`arguments` and `answer` are JSON in a query string, which no body parser has limited:
    past ~1000 levels json.loads raised RecursionError, and the payload view answered 500."""
    _, approval = interrupted_run()
    response = api_as(personas.alice, "review").get(
        f"/api/v1/approvals/{approval.id}/payload",
        {
            "verdict": "edit" if field == "arguments" else "answer",
            "checkpoint_id": str(approval.checkpoint_id),
            "key_id": device_keys.alice_key_id,
            field: "[" * 5000 + "]" * 5000,
        },
    )
    assert response.status_code == 422, response.content
    assert response.json()["code"] == "invalid" and field in response.json()["errors"]


def test_alice_decides_with_her_key_file_and_the_decision_is_device_signed(
    interrupted_run, personas, api_as, device_keys
):
    _, approval = interrupted_run()
    response = device_decide(api_as(personas.alice, "review"), approval, device_keys.alice, reason="checked")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["signer"] == "device" and body["key_id"] == device_keys.alice_key_id
    decision = Decision.objects.get()
    assert decision.reason == "checked" and decision.payload["signer"] == "device"
    audit = AuditEvent.objects.get(action="decision.approve")
    assert audit.data["signer"] == "device" and audit.data["key_id"] == device_keys.alice_key_id


def test_a_server_signed_decision_says_so(interrupted_run, personas, api_as):
    _, approval = interrupted_run()
    response = api_as(personas.alice, "review").post(
        f"/api/v1/approvals/{approval.id}/decision",
        {"verdict": "approve", "checkpoint_id": str(approval.checkpoint_id)},
        format="json",
    )
    assert response.json()["signer"] == "server"


def _refused(response, *, says: str) -> None:
    assert response.status_code == 422, response.json()
    assert response.json()["code"] == "bad_signature"
    assert says in response.json()["detail"]
    assert not Decision.objects.exists()


def test_a_bad_signature_is_refused_with_422(interrupted_run, personas, api_as, device_keys):
    _, approval = interrupted_run()
    client = api_as(personas.alice, "review")
    key_id = device_keys.alice_key_id
    body = client.get(
        f"/api/v1/approvals/{approval.id}/payload",
        {"verdict": "approve", "checkpoint_id": str(approval.checkpoint_id), "key_id": key_id},
    ).json()
    wrong = base64.b64encode(Ed25519PrivateKey.generate().sign(base64.b64decode(body["bytes"]))).decode()
    response = client.post(
        f"/api/v1/approvals/{approval.id}/decision",
        {
            "verdict": "approve",
            "checkpoint_id": str(approval.checkpoint_id),
            "signature": wrong,
            "key_id": key_id,
            "payload": body["payload"],
        },
        format="json",
    )
    _refused(response, says="the device signature does not verify")


def test_a_signed_payload_for_another_decision_is_refused(interrupted_run, personas, api_as, device_keys):
    """Signed for an approval, posted as a rejection: the payload is not this decision's."""
    _, approval = interrupted_run()
    client = api_as(personas.alice, "review")
    key_id = device_keys.alice_key_id
    body = client.get(
        f"/api/v1/approvals/{approval.id}/payload",
        {"verdict": "approve", "checkpoint_id": str(approval.checkpoint_id), "key_id": key_id},
    ).json()
    signature = base64.b64encode(device_keys.alice.sign(base64.b64decode(body["bytes"]))).decode()
    response = client.post(
        f"/api/v1/approvals/{approval.id}/decision",
        {
            "verdict": "reject",
            "reason": "no",
            "checkpoint_id": str(approval.checkpoint_id),
            "signature": signature,
            "key_id": key_id,
            "payload": body["payload"],
        },
        format="json",
    )
    _refused(response, says="the signed payload is not this decision's: reason_sha256, verdict")


def test_a_key_that_is_not_endorsed_or_is_revoked_or_is_someone_elses_cannot_sign(
    interrupted_run, personas, api_as, device_keys
):
    _, approval = interrupted_run()
    client = api_as(personas.alice, "review")
    fresh = Ed25519PrivateKey.generate()
    DeviceKey.objects.create(
        user=personas.alice,
        label="new",
        public_key=public_key_b64(fresh.public_key()),
        key_id="ed25519:" + "1" * 16,
    )
    query = {"verdict": "approve", "checkpoint_id": str(approval.checkpoint_id)}
    assert (
        "is not one of your device keys"
        in client.get(
            f"/api/v1/approvals/{approval.id}/payload", {**query, "key_id": "ed25519:" + "2" * 16}
        ).json()["detail"]
    )
    assert (
        "not endorsed by an admin yet"
        in client.get(
            f"/api/v1/approvals/{approval.id}/payload", {**query, "key_id": "ed25519:" + "1" * 16}
        ).json()["detail"]
    )
    bob = api_as(personas.bob, "review")
    assert (
        bob.get(
            f"/api/v1/approvals/{approval.id}/payload", {**query, "key_id": device_keys.alice_key_id}
        ).status_code
        == 422
    )
    Revocation.objects.create(
        device_key=DeviceKey.objects.get(key_id=device_keys.alice_key_id),
        record={},
        signature="",
        signer_key_id="",
        signed_by=personas.admin,
    )
    response = client.get(
        f"/api/v1/approvals/{approval.id}/payload", {**query, "key_id": device_keys.alice_key_id}
    )
    assert response.status_code == 422 and "has been revoked" in response.json()["detail"]


def test_signature_key_id_and_payload_come_together(interrupted_run, personas, api_as):
    _, approval = interrupted_run()
    response = api_as(personas.alice, "review").post(
        f"/api/v1/approvals/{approval.id}/decision",
        {"verdict": "approve", "checkpoint_id": str(approval.checkpoint_id), "signature": "x"},
        format="json",
    )
    assert response.status_code == 422 and "signature" in response.json()["errors"]


def test_the_worker_is_handed_the_stored_records_and_the_pinned_roots(device_keys):
    trust = DatabaseTrust()
    assert list(trust.roots()) == [DeviceKey.objects.get(user__username="admin").key_id]
    endorsements, revocations = trust.records(device_keys.alice_key_id)
    assert [e.record["user"] for e in endorsements] == ["alice"] and revocations == []
    assert Endorsement.objects.get().signed_by.username == "admin"
    assert device_keys.trust_file.stat().st_mode & 0o777 == 0o444


def test_a_question_takes_a_device_signed_answer_and_the_worker_hands_it_to_the_model(
    interrupted_run, personas, api_as, device_keys, settings
):
    """Where device keys are required a server-signed answer is refused (422); the answer's
    hash is in the payload the device signs, and the gate runs on it."""
    from reviewdesk.runs.execution import run_execute
    from tests.reviewdesk.approvals.test_questions import COLOUR, asking, tool_results

    settings.DESK_REQUIRE_DEVICE_KEYS = True
    run, question = interrupted_run(asking(**COLOUR))
    client = api_as(personas.alice, "review")
    url = f"/api/v1/approvals/{question.id}"
    fields = {"verdict": "answer", "checkpoint_id": str(question.checkpoint_id)}
    refused = client.post(f"{url}/decision", {**fields, "answer": "blue"}, format="json")
    assert refused.status_code == 422 and refused.json()["code"] == "device_signature_required"

    fetched = client.get(f"{url}/payload", {**fields, "key_id": device_keys.alice_key_id, "answer": '"blue"'})
    assert fetched.status_code == 200, fetched.json()
    body = fetched.json()
    assert body["payload"]["answer_sha256"] == sha256_hex("blue") and body["payload"]["version"] == 4
    signature = base64.b64encode(device_keys.alice.sign(base64.b64decode(body["bytes"]))).decode()
    signed = {
        **fields,
        "signature": signature,
        "key_id": device_keys.alice_key_id,
        "payload": body["payload"],
    }
    other = client.post(f"{url}/decision", {**signed, "answer": "red"}, format="json")
    assert other.status_code == 422 and other.json()["code"] == "bad_signature"
    response = client.post(f"{url}/decision", {**signed, "answer": "blue"}, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["signer"] == "device" and response.json()["answer"] == "blue"
    run_execute(run_id=run.id, worker="in-process")
    run.refresh_from_db()
    assert run.status == "succeeded", run.error
    assert tool_results(run) == [json.dumps("blue")]


def test_no_standing_grant_is_made_for_a_tool_that_requires_device_keys(
    interrupted_run, personas, api_as, device_keys, settings
):
    """A grant is server-signed; where device keys are required it is refused (422) before
    anything is stored."""
    settings.DESK_REQUIRE_DEVICE_KEYS = True
    _, approval = interrupted_run()
    response = api_as(personas.alice, "review").post(
        f"/api/v1/approvals/{approval.id}/decision",
        {
            "verdict": "approve",
            "checkpoint_id": str(approval.checkpoint_id),
            "grant": {"match": "exact", "scope": "run"},
        },
        format="json",
    )
    assert response.status_code == 422 and response.json()["code"] == "not_grantable", response.json()
    assert "device key" in response.json()["detail"]
    assert not Decision.objects.exists()
