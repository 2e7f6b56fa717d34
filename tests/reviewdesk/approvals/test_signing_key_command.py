"""`manage.py signing_key`: the operator's way to make, rotate and retire the decision signing
key (docs/running.md, "Production"), run in-process with call_command on key files of the test's own."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from agents.decisions import key_id_for, sign_payload, signature_valid
from reviewdesk.approvals import signing


@pytest.fixture
def key_files(tmp_path, settings):
    """The key in a directory the command makes (as on a fresh host), the keyring in another."""
    settings.DESK_SIGNING_KEY_FILE = tmp_path / "web" / "signing_key.pem"
    settings.DESK_VERIFY_KEYS_FILE = tmp_path / "public" / "verify_keys.json"
    signing._private_key.cache_clear()
    yield Path(settings.DESK_SIGNING_KEY_FILE), Path(settings.DESK_VERIFY_KEYS_FILE)
    signing._private_key.cache_clear()  # later tests sign with the suite's key again


def mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def verifies(keyring: Path, key_id: str, private) -> bool:
    payload = {"decision": "d-1", "verdict": "approve"}
    public = signing.FileKeyring(keyring).public_key(key_id)
    return public is not None and signature_valid(public, payload, sign_payload(private, payload))


def test_create_writes_a_0600_key_and_a_read_only_keyring_that_holds_its_public_half(key_files, capsys):
    key_file, keyring = key_files

    call_command("signing_key", "create")

    key = signing._load_private(key_file)
    key_id = key_id_for(key.public_key())
    assert mode(key_file) == 0o600 and mode(key_file.parent) == 0o700
    assert mode(keyring) == 0o444
    assert list(json.loads(keyring.read_text())) == [key_id]
    assert verifies(keyring, key_id, key)
    assert signing.current_key_id() == key_id  # what the web tier signs with
    assert f"signing key {key_id} written to {key_file} (0600)" in capsys.readouterr().out


def test_create_refuses_to_overwrite_a_key(key_files):
    key_file, keyring = key_files
    call_command("signing_key", "create")
    before, keyring_before = key_file.read_bytes(), keyring.read_text()

    with pytest.raises(CommandError, match="exists: not overwriting a signing key"):
        call_command("signing_key", "create")

    assert key_file.read_bytes() == before and keyring.read_text() == keyring_before


def test_rotate_adds_a_new_key_beside_the_old_and_the_new_one_signs(key_files):
    key_file, keyring = key_files
    call_command("signing_key", "create")
    old = signing._load_private(key_file)
    old_id = key_id_for(old.public_key())

    call_command("signing_key", "rotate")

    new = signing._load_private(key_file)
    new_id = key_id_for(new.public_key())
    assert new_id != old_id and signing.current_key_id() == new_id
    assert sorted(json.loads(keyring.read_text())) == sorted([old_id, new_id])
    assert verifies(keyring, old_id, old)  # decisions signed before the rotation still verify
    assert verifies(keyring, new_id, new)
    assert mode(key_file) == 0o600 and mode(keyring) == 0o444
    assert not key_file.with_name(key_file.name + ".new").exists()


def test_rotate_without_a_key_refuses(key_files):
    key_file, keyring = key_files
    with pytest.raises(CommandError, match="does not exist: `signing_key create` makes the first key"):
        call_command("signing_key", "rotate")
    assert not key_file.exists() and not keyring.exists()


def test_retire_drops_an_old_key_and_refuses_the_one_that_signs(key_files):
    _, keyring = key_files
    call_command("signing_key", "create")
    old_id = signing.current_key_id()
    call_command("signing_key", "rotate")
    new_id = signing.current_key_id()

    with pytest.raises(CommandError, match="is the key that signs now"):
        call_command("signing_key", "retire", new_id)
    call_command("signing_key", "retire", old_id)

    assert list(json.loads(keyring.read_text())) == [new_id]
    with pytest.raises(CommandError, match="is not in"):
        call_command("signing_key", "retire", old_id)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root rotates a key another user owns")
def test_rotate_as_root_leaves_the_key_to_the_user_who_owned_the_old_one(key_files):
    key_file, _ = key_files
    call_command("signing_key", "create")
    os.chown(key_file, 65534, 65534)  # as the section hands it to desk-web

    call_command("signing_key", "rotate")

    assert (key_file.stat().st_uid, key_file.stat().st_gid) == (65534, 65534)
    assert mode(key_file) == 0o600


def test_show_names_the_key_that_signs_and_the_keyrings_ids_and_makes_no_key(key_files, capsys):
    key_file, keyring = key_files
    call_command("signing_key", "show")
    assert "signs with: none" in capsys.readouterr().out
    assert not key_file.exists() and not keyring.exists()

    call_command("signing_key", "create")
    old_id = signing.current_key_id()
    call_command("signing_key", "rotate")
    capsys.readouterr()
    call_command("signing_key", "show")

    out = capsys.readouterr().out
    assert f"signs with: {signing.current_key_id()} ({key_file})" in out
    assert old_id in out and signing.current_key_id() in out
