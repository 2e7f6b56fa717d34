"""The Keys page and its JSON endpoints (session + CSRF): who sees which keys, who may
endorse, and that a record is stored only with a valid signature by the admin's own key."""

from __future__ import annotations

import base64
import json

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from django.test import Client

from agents.decisions import signature_valid
from agents.trust import public_key_b64, public_key_from_b64
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
    # Hers from the page; the fixture's `trust enroll` is audited as the operator's ("system").
    assert AuditEvent.objects.filter(action="device_key.registered", actor=personas.alice).count() == 1
    page = alice.get("/keys/").content.decode()
    assert body["fingerprint"] in page and "laptop" in page
    assert "admin laptop" not in page  # the admin's key is not alice's to see


def test_a_public_key_that_is_not_32_bytes_is_refused(personas):
    status, body = post(logged_in(personas.alice), "/keys/register", {"label": "x", "public_key": "AAAA"})
    assert status == 422 and "32 raw bytes" in body["detail"]


# The identity (order 1), (0, -1) (order 2), an order-8 point, and y = p + 1, the identity
# written unreduced: for each, one fixed signature would verify every message.
WEAK_KEYS = [
    bytes([1]) + bytes(31),
    bytes.fromhex("ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f"),
    bytes.fromhex("26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05"),
    bytes.fromhex("eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f"),
]


@pytest.mark.parametrize("raw", WEAK_KEYS, ids=["identity", "order 2", "order 8", "unreduced"])
def test_a_small_order_public_key_is_refused(personas, raw):
    """OpenSSL takes it, and then R = identity, S = 0 verifies any payload: with such a key
    endorsed, anyone could sign as alice."""
    if raw == WEAK_KEYS[0]:  # why it matters, shown on the identity
        universal = base64.b64encode(bytes([1]) + bytes(63)).decode()
        assert signature_valid(Ed25519PublicKey.from_public_bytes(raw), {"verdict": "approve"}, universal)
    encoded = base64.b64encode(raw).decode()
    with pytest.raises(ValueError, match="small-order or non-canonical"):
        public_key_from_b64(encoded)
    status, body = post(logged_in(personas.alice), "/keys/register", {"label": "x", "public_key": encoded})
    assert status == 422 and "small-order" in body["detail"]


def test_real_keys_are_not_mistaken_for_weak_ones():
    for _ in range(50):
        key = Ed25519PrivateKey.generate().public_key()
        assert public_key_b64(public_key_from_b64(public_key_b64(key))) == public_key_b64(key)


@pytest.mark.parametrize("depth", [100, 5000], ids=["past the limit", "past the decoder"])
def test_deeply_nested_json_to_the_key_endpoints_is_a_400_not_a_500(personas, depth):
    alice = logged_in(personas.alice)
    body = '{"label": "x", "public_key": ' + "[" * depth + "]" * depth + "}"
    for url in ("/keys/register",):
        response = alice.post(url, body, content_type="application/json")
        assert response.status_code == 400, (url, response.status_code)
        assert response.json()["code"] == "invalid"


def test_a_nul_in_a_key_endpoints_body_or_key_id_is_refused_not_a_500(personas):
    """PostgreSQL's text cannot hold U+0000: a label holding one was stored as sent, and a key id
    holding one (%00 in the path) was looked up as sent: a 500 each (the latter for any reviewer,
    on the records endpoint)."""
    alice, admin = logged_in(personas.alice), logged_in(personas.admin)
    key = public_key_b64(Ed25519PrivateKey.generate().public_key())
    status, body = post(alice, "/keys/register", {"label": "lap\u0000top", "public_key": key})
    assert (status, body["code"]) == (400, "invalid") and "NUL" in body["detail"]
    assert not DeviceKey.objects.exists()
    for client, url in ((alice, "/keys/ab%00cd/records"), (admin, "/keys/ab%00cd/endorse")):
        response = client.post(url, "{}", content_type="application/json")
        assert (response.status_code, response.json()["code"]) == (404, "not_found"), url


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
    row = AuditEvent.objects.get(action="device_key.revoked")
    assert row.actor == personas.admin and (row.data["signer"], row.data["via"]) == ("admin", "keys page")
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


def test_a_device_payload_naming_a_decision_id_already_used_is_refused_not_a_500(
    interrupted_run, personas, api_as, device_keys
):
    """The decision id is the server's choice in /payload, but the device signs the payload it
    sends: one that names an id already stored collided on the primary key (IntegrityError)."""
    from agents.decisions import payload_bytes
    from reviewdesk.approvals.models import Decision
    from tests.reviewdesk.device_keys import device_decide, key_id_for

    client = api_as(personas.alice, "review")
    _, first = interrupted_run()
    assert device_decide(client, first, device_keys.alice).status_code == 201
    taken = str(Decision.objects.get(request=first).id)
    _, second = interrupted_run()
    query = {
        "verdict": "approve",
        "checkpoint_id": str(second.checkpoint_id),
        "key_id": key_id_for(device_keys.alice.public_key()),
    }
    payload = client.get(f"/api/v1/approvals/{second.id}/payload", query).json()["payload"]
    payload["decision_id"] = taken
    signature = base64.b64encode(device_keys.alice.sign(payload_bytes(payload))).decode()
    response = client.post(
        f"/api/v1/approvals/{second.id}/decision",
        {**query, "signature": signature, "payload": payload},
        format="json",
    )
    assert response.status_code == 422, response.content
    assert response.json()["code"] == "bad_signature" and "decision id" in response.json()["detail"]
    assert not Decision.objects.filter(request=second).exists()


def _revoke_the_admins_own_key(device_keys) -> str:
    from django.core.management import call_command

    from agents.decisions import key_id_for

    admin_key_id = key_id_for(device_keys.admin.public_key())
    call_command("trust", "revoke", "--key-id", admin_key_id, "--signer", str(device_keys.admin_file))
    return admin_key_id


def test_an_admin_key_that_was_revoked_cannot_draft_a_record(personas, device_keys):
    admin_key_id = _revoke_the_admins_own_key(device_keys)
    status, body = post(
        logged_in(personas.admin), f"/keys/{device_keys.alice_key_id}/revoke", {"signer_key_id": admin_key_id}
    )
    assert status == 422 and "is revoked" in body["detail"], body
    assert body["errors"] == {"signer_key_id": ["revoked"]}


@pytest.mark.parametrize("kind", ["endorsement", "revocation"])
def test_a_record_signed_by_a_revoked_admin_key_is_not_stored(personas, device_keys, kind):
    """Workers ignore it once the trust file is pinned again; the keys page refuses it at once."""
    from django.utils import timezone

    from agents.trust import endorsement_record, record_bytes, revocation_record

    admin_key_id = _revoke_the_admins_own_key(device_keys)
    bob_key = Ed25519PrivateKey.generate()
    status, registered = post(
        logged_in(personas.bob),
        "/keys/register",
        {"label": "bob", "public_key": public_key_b64(bob_key.public_key())},
    )
    assert status == 201
    now = timezone.now()
    if kind == "endorsement":
        record = endorsement_record(
            user="bob",
            public_key=public_key_b64(bob_key.public_key()),
            roles=("reviewer",),
            issued_at=now,
            not_after=now + timezone.timedelta(days=1),
            signer_key_id=admin_key_id,
        )
    else:
        record = revocation_record(key_id=registered["key_id"], revoked_at=now, signer_key_id=admin_key_id)
    signature = base64.b64encode(device_keys.admin.sign(record_bytes(record))).decode()
    before = (Endorsement.objects.count(), Revocation.objects.count())
    status, body = post(
        logged_in(personas.admin),
        f"/keys/{registered['key_id']}/records",
        {"record": record, "signature": signature},
    )
    assert status == 422 and "is revoked" in body["detail"], body
    assert (Endorsement.objects.count(), Revocation.objects.count()) == before
