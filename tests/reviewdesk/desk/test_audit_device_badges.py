"""The audit page's badge for a device-signed decision: the workers' trust decision (the
endorsements and revocations under the pinned roots, agents.trust), not the key row the
database holds, which a database writer can insert or swap."""

from __future__ import annotations

import base64

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from agents.canonical import canonical_json
from agents.decisions import key_id_for
from agents.trust import fingerprint, public_key_b64
from reviewdesk.accounts.models import DeviceKey
from reviewdesk.approvals.models import Decision
from tests.reviewdesk.device_keys import device_decide

pytestmark = pytest.mark.django_db

VALID_DEVICE = "✓ signature valid · device-signed"


def audit_page(admin) -> str:
    client = Client()
    client.force_login(admin)
    return client.get(reverse("audit"), {"action": "decision."}).content.decode()


@pytest.fixture
def device_decided(interrupted_run, personas, api_as, device_keys) -> Decision:
    _, approval = interrupted_run()
    response = device_decide(api_as(personas.alice, "review"), approval, device_keys.alice, reason="checked")
    assert response.status_code == 201, response.json()
    return Decision.objects.get()


def test_a_device_signed_decision_under_a_pinned_endorsement_shows_valid(device_decided, personas):
    assert audit_page(personas.admin).count(VALID_DEVICE) == 1


def test_a_decision_by_a_revoked_device_key_is_not_shown_verified(device_decided, personas, device_keys):
    call_command(
        "trust", "revoke", "--key-id", device_keys.alice_key_id, "--signer", str(device_keys.admin_file)
    )
    page = audit_page(personas.admin)
    assert VALID_DEVICE not in page
    assert "✗ device key not trusted" in page and "revoked" in page


def _resign(decision: Decision, key: Ed25519PrivateKey) -> None:
    """What a database writer can do with a key of its own: a payload naming it, signed by it."""
    key_id = key_id_for(key.public_key())
    decision.payload = {**decision.payload, "key_id": key_id}
    decision.signature = base64.b64encode(key.sign(canonical_json(decision.payload))).decode()
    decision.key_id = key_id
    decision.save()


def test_a_key_row_a_database_writer_inserts_does_not_verify_its_decisions(device_decided, personas):
    mallory = Ed25519PrivateKey.generate()
    DeviceKey.objects.create(
        user=personas.alice,
        label="inserted",
        public_key=public_key_b64(mallory.public_key()),
        key_id=key_id_for(mallory.public_key()),
        fingerprint=fingerprint(mallory.public_key()),
    )
    _resign(device_decided, mallory)
    page = audit_page(personas.admin)
    assert VALID_DEVICE not in page
    assert "✗ device key not trusted" in page and "no endorsement" in page


def test_a_registered_public_key_a_database_writer_swaps_does_not_verify(
    device_decided, personas, device_keys
):
    """The key row keeps alice's key id, its public key is the writer's: the endorsement,
    signed under the pinned root, still names alice's."""
    mallory = Ed25519PrivateKey.generate()
    DeviceKey.objects.filter(key_id=device_keys.alice_key_id).update(
        public_key=public_key_b64(mallory.public_key())
    )
    decision = device_decided
    decision.signature = base64.b64encode(mallory.sign(canonical_json(decision.payload))).decode()
    decision.save()
    page = audit_page(personas.admin)
    assert VALID_DEVICE not in page
    assert "✗ device key not trusted" in page and "does not verify" in page


def test_a_device_signed_decision_whose_row_names_another_reviewer_is_not_shown_verified(
    device_decided, personas
):
    """alice's device-signed decision (shown valid untouched: the first test here), its row's
    reviewer edited in the database to bob: not shown valid, and the badge names both."""
    Decision.objects.filter(pk=device_decided.pk).update(reviewer=personas.bob)
    page = audit_page(personas.admin)
    assert VALID_DEVICE not in page
    assert "✗ invalid: signed by another reviewer (alice), the decision names bob" in page
