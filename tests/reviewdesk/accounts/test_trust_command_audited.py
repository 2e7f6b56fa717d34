"""`manage.py trust` writes its audit rows in the name of whoever ran it (the server's
operator: "system", the command in `via`, as create_token and seed_demo do), with the key's
owner and the signing admin in the row's data; the Keys page writes them in its user's name."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from agents.decisions import key_id_for
from reviewdesk.accounts.management.commands.trust import load_key_file
from reviewdesk.audit.models import AuditEvent

pytestmark = pytest.mark.django_db


def _row(action: str, key_id: str) -> AuditEvent:
    return AuditEvent.objects.get(action=action, subject_id=key_id)


def test_trust_register_enroll_and_revoke_are_audited_as_the_operator_with_the_owner_in_data(
    personas, settings, tmp_path
):
    settings.DESK_TRUST_FILE = tmp_path / "trust.json"
    admin_file, alice_file = tmp_path / "admin.pem", tmp_path / "alice.pem"
    call_command("trust", "keygen", str(admin_file))
    call_command("trust", "register", "--user", "admin", "--key", str(admin_file))
    call_command("trust", "pin", "--user", "admin")
    call_command("trust", "keygen", str(alice_file))
    call_command("trust", "enroll", "--user", "alice", "--key", str(alice_file), "--signer", str(admin_file))
    alice_key_id = key_id_for(load_key_file(str(alice_file)).public_key())
    call_command("trust", "revoke", "--key-id", alice_key_id, "--signer", str(admin_file))

    registered = _row("device_key.registered", key_id_for(load_key_file(str(admin_file)).public_key()))
    assert (registered.actor, registered.actor_name) == (None, "system")
    assert registered.data["user"] == "admin" and registered.data["via"] == "manage.py trust register"

    enrolled = _row("device_key.registered", alice_key_id)
    assert (enrolled.actor, enrolled.actor_name) == (None, "system")
    assert enrolled.data["user"] == "alice" and enrolled.data["via"] == "manage.py trust enroll"

    for action, via in (
        ("device_key.endorsed", "manage.py trust enroll"),
        ("device_key.revoked", "manage.py trust revoke"),
    ):
        row = _row(action, alice_key_id)
        assert (row.actor, row.actor_name) == (None, "system"), action
        assert row.data["user"] == "alice" and row.data["signer"] == "admin" and row.data["via"] == via
