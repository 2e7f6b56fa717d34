"""The worker's gate and device keys, in-process on the database: with device keys required
(DESK_REQUIRE_DEVICE_KEYS), only a decision signed by the reviewer's endorsed, unrevoked
device key runs the tool; every refusal below leaves no email, no ledger row, an unconsumed
decision and a failed run that says why."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.utils import timezone

from agents.decisions import key_id_for
from agents.testing.trust import endorse, revoke
from agents.trust import public_key_b64
from reviewdesk.accounts.management.commands.trust import load_key_file
from reviewdesk.accounts.models import DeviceKey, Endorsement, Revocation
from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.approvals.models import Decision
from reviewdesk.runs.execution import run_execute
from reviewdesk.runs.models import RunStatus, SideEffect
from tests.reviewdesk.device_keys import device_decide

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def required(settings):
    settings.DESK_REQUIRE_DEVICE_KEYS = True


@pytest.fixture
def alice(personas, api_as):
    return api_as(personas.alice, "review")


def assert_refused(run, says: str, outbox) -> None:
    run_execute(run_id=run.id, worker="in-process")
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and run.error_kind == "approval", run.error
    assert says in run.error
    assert outbox == []
    assert not SideEffect.objects.filter(run=run).exists()
    assert Decision.objects.get().consumed_at is None


def test_alices_device_signed_approval_runs_the_tool(interrupted_run, alice, device_keys, mailoutbox):
    run, approval = interrupted_run()
    assert device_decide(alice, approval, device_keys.alice).status_code == 201
    run_execute(run_id=run.id, worker="in-process")
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert [m.to for m in mailoutbox] == [["ada@example.com"]]
    assert Decision.objects.get().consumed_at is not None


def test_the_desk_refuses_a_server_signed_approval_where_device_keys_are_required(interrupted_run, alice):
    _, approval = interrupted_run()
    response = alice.post(
        f"/api/v1/approvals/{approval.id}/decision",
        {"verdict": "approve", "checkpoint_id": str(approval.checkpoint_id)},
        format="json",
    )
    assert response.status_code == 422 and response.json()["code"] == "device_signature_required"
    assert not Decision.objects.exists()
    rejected = alice.post(
        f"/api/v1/approvals/{approval.id}/decision",
        {"verdict": "reject", "reason": "no", "checkpoint_id": str(approval.checkpoint_id)},
        format="json",
    )
    assert rejected.status_code == 201  # a rejection runs nothing: the server may sign it


def test_a_decision_signed_with_the_servers_key_is_refused(
    interrupted_run, personas, device_keys, settings, mailoutbox
):
    """Signed while device keys were not required (or by a web tier that skipped the check):
    the worker refuses it all the same."""
    run, approval = interrupted_run()
    settings.DESK_REQUIRE_DEVICE_KEYS = False
    approval_decide(
        approval_id=approval.id,
        reviewer=personas.alice,
        verdict="approve",
        checkpoint_id=str(approval.checkpoint_id),
    )
    settings.DESK_REQUIRE_DEVICE_KEYS = True
    assert_refused(run, "requires a decision signed by the reviewer's device key", mailoutbox)


def test_alices_public_key_swapped_in_the_database_is_refused(
    interrupted_run, alice, device_keys, mailoutbox
):
    """A database writer puts mallory's public key in alice's row; the server, which trusts its
    row, accepts mallory's signature; the worker checks the endorsement, which names alice's key."""
    run, approval = interrupted_run()
    mallory = Ed25519PrivateKey.generate()
    DeviceKey.objects.filter(key_id=device_keys.alice_key_id).update(
        public_key=public_key_b64(mallory.public_key())
    )
    response = device_decide(alice, approval, mallory, key_id=device_keys.alice_key_id)
    assert response.status_code == 201, response.json()
    assert_refused(run, "device signature does not verify", mailoutbox)


def test_an_endorsement_signed_by_an_unpinned_key_is_refused(
    interrupted_run, alice, personas, device_keys, mailoutbox
):
    """A database writer replaces alice's endorsement with one signed by a key of its own."""
    run, approval = interrupted_run()
    stranger = Ed25519PrivateKey.generate()
    forged = endorse(stranger, device_keys.alice, user="alice", issued_at=timezone.now())
    Endorsement.objects.update(
        record=forged.record, signature=forged.signature, signer_key_id=forged.record["signer_key_id"]
    )
    assert device_decide(alice, approval, device_keys.alice).status_code == 201
    assert_refused(run, "endorsement is not signed by a pinned root", mailoutbox)


def test_a_key_revoked_after_the_decision_is_refused(
    interrupted_run, alice, personas, device_keys, mailoutbox
):
    run, approval = interrupted_run()
    assert device_decide(alice, approval, device_keys.alice).status_code == 201
    signed = revoke(device_keys.admin, device_keys.alice, at=timezone.now())
    Revocation.objects.create(
        device_key=DeviceKey.objects.get(key_id=device_keys.alice_key_id),
        record=signed.record,
        signature=signed.signature,
        signer_key_id=signed.record["signer_key_id"],
        signed_by=personas.admin,
    )
    assert_refused(run, "has been revoked", mailoutbox)


def test_an_expired_endorsement_is_refused(interrupted_run, alice, device_keys, mailoutbox):
    run, approval = interrupted_run()
    old = endorse(
        device_keys.admin,
        device_keys.alice,
        user="alice",
        issued_at=timezone.now() - timedelta(days=2),
        valid=timedelta(days=1),
    )
    Endorsement.objects.update(record=old.record, signature=old.signature)
    assert device_decide(alice, approval, device_keys.alice).status_code == 201
    assert_refused(run, "endorsement has expired", mailoutbox)


def test_a_device_signature_over_different_arguments_is_refused(
    interrupted_run, alice, device_keys, mailoutbox
):
    run, approval = interrupted_run()
    assert device_decide(alice, approval, device_keys.alice).status_code == 201
    decision = Decision.objects.get()
    decision.arguments = {**decision.arguments, "to": "mallory@example.com"}
    decision.save()
    assert_refused(run, "arguments_sha256 differs", mailoutbox)


def test_a_worker_without_a_trust_file_refuses_device_signed_decisions(
    interrupted_run, alice, device_keys, settings, mailoutbox
):
    run, approval = interrupted_run()
    assert device_decide(alice, approval, device_keys.alice).status_code == 201
    settings.DESK_TRUST_FILE = device_keys.trust_file.with_name("missing.json")
    assert_refused(run, "pinned root", mailoutbox)


def test_a_revocation_pinned_in_the_trust_file_holds_when_its_row_is_deleted(
    interrupted_run, alice, personas, device_keys, mailoutbox
):
    """Revoked, pinned again (`manage.py trust pin` writes revoked key ids into the file), then
    a database writer deletes the revocation row: the worker still refuses the key."""
    from django.core.management import call_command

    run, approval = interrupted_run()
    assert device_decide(alice, approval, device_keys.alice).status_code == 201
    call_command(
        "trust", "revoke", "--key-id", device_keys.alice_key_id, "--signer", str(device_keys.admin_file)
    )
    call_command("trust", "pin", "--user", "admin")
    Revocation.objects.all().delete()
    assert_refused(run, "is revoked in the trust file", mailoutbox)


def test_a_pinned_revocation_survives_the_next_pin_after_its_row_is_deleted(
    interrupted_run, alice, device_keys, mailoutbox
):
    """As above, and then the operator pins again (docs/device-keys.md asks for it after adding an admin
    key or revoking any key): the new file must still name the key, whatever the database now
    says. It was rebuilt from the revocation rows alone, and the deleted row un-revoked alice."""
    from django.core.management import call_command

    run, approval = interrupted_run()
    assert device_decide(alice, approval, device_keys.alice).status_code == 201
    call_command(
        "trust", "revoke", "--key-id", device_keys.alice_key_id, "--signer", str(device_keys.admin_file)
    )
    call_command("trust", "pin", "--user", "admin")
    Revocation.objects.all().delete()
    call_command("trust", "pin", "--user", "admin")
    assert_refused(run, "is revoked in the trust file", mailoutbox)


def test_a_revocation_by_a_root_later_retired_still_holds(
    interrupted_run, alice, device_keys, tmp_path, mailoutbox
):
    """The admin holds two pinned keys; alice's key, endorsed by both, is revoked with the first;
    the first is then retired (revoked with the second) and the roots pinned again. Her key's
    revocation was signed by a root the workers pinned: it must not lapse with that root."""
    from django.core.management import call_command

    second = tmp_path / "admin-second.pem"
    call_command("trust", "keygen", str(second))
    call_command("trust", "register", "--user", "admin", "--key", str(second), "--label", "admin desktop")
    second_id = key_id_for(load_key_file(str(second)).public_key())
    call_command("trust", "pin", "--user", "admin", "--add", second_id)  # its fingerprint compared
    call_command(
        "trust", "enroll", "--user", "alice", "--key", str(device_keys.alice_file), "--signer", str(second)
    )
    run, approval = interrupted_run()
    assert device_decide(alice, approval, device_keys.alice).status_code == 201
    call_command(
        "trust", "revoke", "--key-id", device_keys.alice_key_id, "--signer", str(device_keys.admin_file)
    )
    first_key_id = key_id_for(device_keys.admin.public_key())
    call_command("trust", "revoke", "--key-id", first_key_id, "--signer", str(second))
    call_command("trust", "pin", "--user", "admin")
    assert_refused(run, "revoked", mailoutbox)


def test_a_revoked_root_whose_row_is_deleted_is_not_pinned_again(device_keys, tmp_path):
    """The same for a root: once a file names the admin's old key revoked, deleting its row does
    not make the next pin trust it again."""
    from django.core.management import CommandError, call_command

    second = tmp_path / "admin-second.pem"
    call_command("trust", "keygen", str(second))
    call_command("trust", "register", "--user", "admin", "--key", str(second), "--label", "admin desktop")
    second_id = key_id_for(load_key_file(str(second)).public_key())
    call_command("trust", "pin", "--user", "admin", "--add", second_id)  # its fingerprint compared
    first_key_id = key_id_for(device_keys.admin.public_key())
    call_command("trust", "revoke", "--key-id", first_key_id, "--signer", str(second))
    call_command("trust", "pin", "--user", "admin")
    Revocation.objects.all().delete()
    call_command("trust", "pin", "--user", "admin")  # not pinned before, not named: left out
    with pytest.raises(CommandError, match="revoked keys cannot be roots"):
        call_command("trust", "pin", "--user", "admin", "--add", first_key_id)  # named, and still refused
    pinned = json.loads(device_keys.trust_file.read_text())
    assert first_key_id not in [root["key_id"] for root in pinned["roots"]]
    assert first_key_id in pinned["revoked"]


def test_a_key_row_inserted_for_the_admin_is_no_root_at_the_next_pin_until_named(
    interrupted_run, alice, personas, device_keys, mailoutbox
):
    """A database writer inserts a key of their own as the admin's and endorses alice's key
    with it (a forged endorsement for a key the admin never endorsed). The routine re-pin
    pinned every key row of the admin's: the writer's key became a root and its endorsement
    held. A re-pin keeps the roots pinned and adds only keys the operator names."""
    from django.core.management import call_command

    from reviewdesk.accounts.devicekeys import device_key_register

    writer = Ed25519PrivateKey.generate()
    writer_row = device_key_register(
        user=personas.admin, label="not the admin's", public_key=public_key_b64(writer.public_key())
    )
    Endorsement.objects.all().delete()  # the admin's real endorsement of alice, withheld
    forged = endorse(writer, device_keys.alice, user="alice", issued_at=timezone.now() - timedelta(minutes=1))
    Endorsement.objects.create(
        device_key=DeviceKey.objects.get(key_id=device_keys.alice_key_id),
        signed_by=personas.admin,
        signer_key_id=writer_row.key_id,
        record=forged.record,
        signature=forged.signature,
    )

    call_command("trust", "pin", "--user", "admin")

    pinned = json.loads(device_keys.trust_file.read_text())
    assert [root["key_id"] for root in pinned["roots"]] == [key_id_for(device_keys.admin.public_key())]
    run, approval = interrupted_run()
    assert device_decide(alice, approval, device_keys.alice).status_code == 201
    assert_refused(run, "endorse", mailoutbox)


def test_a_re_pin_keeps_a_roots_pinned_public_key_when_its_row_is_swapped(device_keys):
    """A database writer swaps the public key in the admin's pinned key row: the next pin
    wrote the row's key into the file under the pinned id."""
    from django.core.management import call_command

    admin_id = key_id_for(device_keys.admin.public_key())
    DeviceKey.objects.filter(key_id=admin_id).update(
        public_key=public_key_b64(Ed25519PrivateKey.generate().public_key())
    )
    call_command("trust", "pin", "--user", "admin")
    pinned = json.loads(device_keys.trust_file.read_text())
    assert pinned["roots"] == [
        {
            **pinned["roots"][0],
            "key_id": admin_id,
            "public_key": public_key_b64(device_keys.admin.public_key()),
        }
    ]


def test_control_a_key_named_with_add_is_pinned_beside_the_roots(device_keys, tmp_path):
    from django.core.management import CommandError, call_command

    second = tmp_path / "admin-second.pem"
    call_command("trust", "keygen", str(second))
    call_command("trust", "register", "--user", "admin", "--key", str(second), "--label", "admin desktop")
    second_id = key_id_for(load_key_file(str(second)).public_key())
    call_command("trust", "pin", "--user", "admin")
    assert second_id not in device_keys.trust_file.read_text()
    call_command("trust", "pin", "--user", "admin", "--add", second_id)
    pinned = json.loads(device_keys.trust_file.read_text())
    assert sorted(r["key_id"] for r in pinned["roots"]) == sorted(
        [key_id_for(device_keys.admin.public_key()), second_id]
    )
    with pytest.raises(CommandError, match="not a device key of this admin"):
        call_command("trust", "pin", "--user", "admin", "--add", device_keys.alice_key_id)
