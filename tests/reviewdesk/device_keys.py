"""Device-key fixtures for in-process tests: the admin's key pinned in a trust file, alice's
key file registered and endorsed through `manage.py trust`, and a client that signs like
examples/sign_decision.py."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.core.management import call_command

from agents.decisions import key_id_for
from reviewdesk.accounts.management.commands.trust import load_key_file


@dataclass
class DeviceKeys:
    admin: Ed25519PrivateKey
    alice: Ed25519PrivateKey
    admin_file: Path
    alice_file: Path
    trust_file: Path

    @property
    def alice_key_id(self) -> str:
        return key_id_for(self.alice.public_key())


@pytest.fixture
def device_keys(tmp_path, settings, personas) -> DeviceKeys:
    """The bootstrap as docs/device-keys.md tells it, with key files: keygen, register, pin, enroll."""
    settings.DESK_TRUST_FILE = tmp_path / "trust.json"
    admin_file, alice_file = tmp_path / "admin.pem", tmp_path / "alice.pem"
    call_command("trust", "keygen", str(admin_file))
    call_command("trust", "register", "--user", "admin", "--key", str(admin_file), "--label", "admin laptop")
    call_command("trust", "pin", "--user", "admin")
    call_command("trust", "keygen", str(alice_file))
    call_command("trust", "enroll", "--user", "alice", "--key", str(alice_file), "--signer", str(admin_file))
    return DeviceKeys(
        admin=load_key_file(str(admin_file)),
        alice=load_key_file(str(alice_file)),
        admin_file=admin_file,
        alice_file=alice_file,
        trust_file=settings.DESK_TRUST_FILE,
    )


def device_decide(client, approval, key: Ed25519PrivateKey, *, verdict="approve", **fields):
    """GET /payload, sign its bytes, POST the decision with signature, key_id and payload."""
    query = {
        "verdict": verdict,
        "checkpoint_id": str(approval.checkpoint_id),
        "key_id": key_id_for(key.public_key()),
        **fields,
    }
    fetched = client.get(f"/api/v1/approvals/{approval.id}/payload", query)
    assert fetched.status_code == 200, fetched.json()
    body = fetched.json()
    signature = base64.b64encode(key.sign(base64.b64decode(body["bytes"]))).decode()
    return client.post(
        f"/api/v1/approvals/{approval.id}/decision",
        {
            "verdict": verdict,
            "checkpoint_id": str(approval.checkpoint_id),
            **fields,
            "signature": signature,
            "key_id": query["key_id"],
            "payload": body["payload"],
        },
        format="json",
    )
