"""The Keys page and its JSON endpoints (session + CSRF): who sees which keys, who may
endorse, and that a record is stored only with a valid signature by the admin's own key."""

from __future__ import annotations

import base64
import json

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.test import Client

from agents.trust import public_key_b64
from reviewdesk.accounts.models import DeviceKey, Endorsement, Revocation
from reviewdesk.audit.models import AuditEvent

pytestmark = pytest.mark.django_db


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def post(client: Client, url: str, body) -> tuple[int, dict]:
    response = client.post(url, json.dumps(body), content_type="application/json")
    return response.status_code, response.json()


def test_a_reviewer_registers_a_public_key_and_sees_only_their_own(personas, device_keys):
    alice = logged_in(personas.alice)
    key = Ed25519PrivateKey.generate()
    status, body = post(
        alice, "/keys/register", {"label": "laptop", "public_key": public_key_b64(key.public_key())}
    )
    assert status == 201 and body["key_id"].startswith("ed25519:")
    assert DeviceKey.objects.get(key_id=body["key_id"]).user == personas.alice
    assert AuditEvent.objects.filter(action="device_key.registered", actor=personas.alice).count() == 2
    page = alice.get("/keys/").content.decode()
    assert body["fingerprint"] in page and "laptop" in page
    assert "admin laptop" not in page  # the admin's key is not alice's to see


def test_a_public_key_that_is_not_32_bytes_is_refused(personas):
    status, body = post(logged_in(personas.alice), "/keys/register", {"label": "x", "public_key": "AAAA"})
    assert status == 422 and "32 raw bytes" in body["detail"]


@pytest.mark.parametrize("depth", [100, 5000], ids=["past the limit", "past the decoder"])
def test_deeply_nested_json_to_the_key_endpoints_is_a_400_not_a_500(personas, depth):
    alice = logged_in(personas.alice)
    body = '{"label": "x", "public_key": ' + "[" * depth + "]" * depth + "}"
    for url in ("/keys/register",):
        response = alice.post(url, body, content_type="application/json")
        assert response.status_code == 400, (url, response.status_code)
        assert response.json()["code"] == "invalid"


def test_a_reviewer_cannot_draft_or_store_an_endorsement(personas, device_keys):
    alice = logged_in(personas.alice)
    key_id = device_keys.alice_key_id
    status, _ = post(alice, f"/keys/{key_id}/endorse", {"signer_key_id": key_id})
    assert status == 403
    record = {"type": "device-endorsement", "key_id": key_id, "signer_key_id": key_id}
    status, _ = post(alice, f"/keys/{key_id}/records", {"record": record, "signature": ""})
    assert status == 403
    assert Endorsement.objects.count() == 1  # the fixture's, from manage.py trust enroll


def test_the_admin_revokes_with_a_signature_by_their_own_key(personas, device_keys):
    admin = logged_in(personas.admin)
    key_id = device_keys.alice_key_id
    admin_key_id = DeviceKey.objects.get(user=personas.admin).key_id
    status, draft = post(admin, f"/keys/{key_id}/revoke", {"signer_key_id": admin_key_id})
    assert status == 200 and draft["record"]["key_id"] == key_id
    forged = base64.b64encode(Ed25519PrivateKey.generate().sign(base64.b64decode(draft["bytes"]))).decode()
    status, body = post(admin, f"/keys/{key_id}/records", {"record": draft["record"], "signature": forged})
    assert status == 422 and body["code"] == "bad_signature"
    assert not Revocation.objects.exists()
    signature = base64.b64encode(device_keys.admin.sign(base64.b64decode(draft["bytes"]))).decode()
    status, _ = post(admin, f"/keys/{key_id}/records", {"record": draft["record"], "signature": signature})
    assert status == 201 and Revocation.objects.get().signed_by == personas.admin
    assert "revoked" in admin.get("/keys/").content.decode()


def test_an_admin_cannot_sign_with_someone_elses_key(personas, device_keys):
    status, body = post(
        logged_in(personas.admin),
        f"/keys/{device_keys.alice_key_id}/endorse",
        {"signer_key_id": device_keys.alice_key_id},
    )
    assert status == 422 and "your own device keys" in body["detail"]


def test_a_device_payload_older_than_allowed_is_refused(
    interrupted_run, personas, api_as, device_keys, settings
):
    from tests.reviewdesk.device_keys import device_decide

    settings.DESK_DEVICE_PAYLOAD_MAX_AGE_SECONDS = 0
    _, approval = interrupted_run()
    response = device_decide(api_as(personas.alice, "review"), approval, device_keys.alice)
    assert response.status_code == 422 and "too old" in response.json()["detail"]


def test_the_admin_lists_device_keys_and_records_read_only(personas, device_keys):
    admin = logged_in(personas.admin)
    for model in ("devicekey", "endorsement", "revocation"):
        assert admin.get(f"/admin/accounts/{model}/").status_code == 200
    assert device_keys.alice_key_id in admin.get("/admin/accounts/devicekey/").content.decode()
    assert admin.get("/admin/accounts/devicekey/add/").status_code == 403
