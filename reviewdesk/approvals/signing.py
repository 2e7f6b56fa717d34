"""Who signs a decision: the web tier's Ed25519 key (workers verify with public keys only), or
the reviewer's own device key where a tool requires one (`device_decision_required`).

Not HMAC and not django.core.signing: workers load Django settings, so anything
keyed on SECRET_KEY could be forged by a compromised worker. The private key
file is read only by `sign`; the keyring file holds public keys by key id, so
keys can rotate (add the new public key, keep the old one until its decisions
are consumed). What is signed, and how key ids are formed, is the decision
contract in `agents.decisions`; this module only keeps the keys.
"""

from __future__ import annotations

import base64
import json
import os
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from django.conf import settings

from agents.decisions import key_id_for, sign_payload
from agents.registry import UnknownAgent, get_agent
from reviewdesk.conf import var


def _write_private(path: Path, data: bytes) -> None:
    """Create it whole or raise FileExistsError: a racing reader never sees it half written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    var.create_private(path, data)


def _add_to_keyring(path: Path, public_key: Ed25519PublicKey) -> None:
    keys = read_keyring(path)
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    keys[key_id_for(public_key)] = base64.b64encode(raw).decode()
    _write_keyring(path, keys)


def read_keyring(path: Path) -> dict[str, str]:
    """The keyring's entries (key id: base64 public key); empty when there is no file."""
    return json.loads(path.read_text()) if path.exists() else {}


def _write_keyring(path: Path, keys: dict[str, str]) -> None:
    """Replace the keyring whole (a reader never sees half of it), readable by all and writable
    by none: a worker's start-up check refuses a keyring with a write bit when it runs as root,
    and one it could write otherwise. The rename needs the directory's write bit, not the file's."""
    path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")  # two writers at once
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
    with os.fdopen(fd, "w") as handle:
        handle.write(json.dumps(keys, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


def _new_private_key() -> tuple[Ed25519PrivateKey, bytes]:
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return key, pem


@lru_cache(maxsize=1)
def _private_key() -> Ed25519PrivateKey:
    path = Path(settings.DESK_SIGNING_KEY_FILE)
    if not path.exists():
        key, pem = _new_private_key()
        try:
            _write_private(path, pem)
        except FileExistsError:
            pass  # another process won the race: use its key
        else:
            _add_to_keyring(Path(settings.DESK_VERIFY_KEYS_FILE), key.public_key())
    loaded = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(loaded, Ed25519PrivateKey):
        raise ValueError(f"{path} is not an Ed25519 private key")
    return loaded


def ensure_keys() -> str:
    """Create the signing key and its keyring entry if missing; return the key id."""
    key = _private_key()
    keyring = Path(settings.DESK_VERIFY_KEYS_FILE)
    key_id = key_id_for(key.public_key())
    if key_id not in (json.loads(keyring.read_text()) if keyring.exists() else {}):
        _add_to_keyring(keyring, key.public_key())
    return key_id


# --- The operator's commands (`manage.py signing_key`) --------------------------------------
class SigningKeyError(Exception):
    """A key command refused: the message says why and what to do."""


def _load_private(path: Path) -> Ed25519PrivateKey:
    loaded = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(loaded, Ed25519PrivateKey):
        raise SigningKeyError(f"{path} is not an Ed25519 private key")
    return loaded


def signing_key_create() -> str:
    """Make the desk's signing key at DESK_SIGNING_KEY_FILE (0600, in a 0700 directory if it makes
    one) and add its public half to the keyring at DESK_VERIFY_KEYS_FILE; return its key id.
    Refuses when the key file exists: a key replaced by mistake would strand every decision
    signed with it that no worker has consumed yet (rotate instead)."""
    path = Path(settings.DESK_SIGNING_KEY_FILE)
    key, pem = _new_private_key()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        _write_private(path, pem)
    except FileExistsError:
        raise SigningKeyError(
            f"{path} exists: not overwriting a signing key (`signing_key rotate` adds a new one beside it)"
        ) from None
    _add_to_keyring(Path(settings.DESK_VERIFY_KEYS_FILE), key.public_key())
    _private_key.cache_clear()
    return key_id_for(key.public_key())


def signing_key_rotate() -> tuple[str, str]:
    """A new signing key beside the old: the keyring gains the new public key first and keeps
    the old one (decisions signed with it still verify until consumed), then the new private key
    takes the old one's place. Returns (old key id, new key id). The web tier signs with the new
    key once restarted; workers that read this keyring (or a copy made after it) verify both."""
    path = Path(settings.DESK_SIGNING_KEY_FILE)
    if not path.exists():
        raise SigningKeyError(f"{path} does not exist: `signing_key create` makes the first key")
    old = key_id_for(_load_private(path).public_key())
    key, pem = _new_private_key()
    _add_to_keyring(Path(settings.DESK_VERIFY_KEYS_FILE), key.public_key())
    fresh = path.with_name(path.name + ".new")
    try:
        _write_private(fresh, pem)
    except FileExistsError:
        raise SigningKeyError(
            f"{fresh} exists: an earlier rotation stopped half-way; remove it and rotate again"
        ) from None
    owner = path.stat()
    if os.geteuid() == 0:  # root rotates the web's key: it stays the web's
        os.chown(fresh, owner.st_uid, owner.st_gid)
    fresh.replace(path)
    _private_key.cache_clear()
    return old, key_id_for(key.public_key())


def signing_key_retire(key_id: str) -> None:
    """Remove `key_id` from the keyring: decisions signed with it stop verifying. Refuses the
    key that signs now, and an id the keyring does not hold."""
    keyring = Path(settings.DESK_VERIFY_KEYS_FILE)
    keys = read_keyring(keyring)
    if key_id not in keys:
        raise SigningKeyError(f"{key_id} is not in {keyring}")
    path = Path(settings.DESK_SIGNING_KEY_FILE)
    if path.exists() and key_id_for(_load_private(path).public_key()) == key_id:
        raise SigningKeyError(f"{key_id} is the key that signs now ({path}): rotate first")
    del keys[key_id]
    _write_keyring(keyring, keys)


def current_key_id() -> str:
    return key_id_for(_private_key().public_key())


def sign(payload: dict[str, Any]) -> str:
    """Base64 Ed25519 signature over the RFC 8785 canonical payload, with the desk's key."""
    return sign_payload(_private_key(), payload)


def desk_public_keys() -> list[dict[str, Any]]:
    """The desk's public keys as `GET /api/v1/keys` serves them: every key in the keyring (the
    one that signs now is "active"; older ones still verify their decisions, "retired"), in
    key-id order. The keyring keeps no dates: `created_at` is null."""
    keys = read_keyring(Path(settings.DESK_VERIFY_KEYS_FILE))
    active = current_key_id()
    return [
        {
            "key_id": key_id,
            "alg": "Ed25519",
            "public_key": keys[key_id],
            "status": "active" if key_id == active else "retired",
            "created_at": None,
        }
        for key_id in sorted(keys)
    ]


class FileKeyring:
    """Public keys by key id, read from DESK_VERIFY_KEYS_FILE (no private material)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = Path(path or settings.DESK_VERIFY_KEYS_FILE)

    def public_key(self, key_id: str) -> Ed25519PublicKey | None:
        try:
            keys = json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        encoded = keys.get(key_id)
        if encoded is None:
            return None
        return Ed25519PublicKey.from_public_bytes(base64.b64decode(encoded))


# --- Keys held apart: what a worker may hold ----------------------------------------------
def worker_key_problems() -> list[str]:
    """Why this process, as a worker, holds more than public keys read-only; empty when it does not.

    `os.access` answers for this process's uid. As root it says yes to everything, and root
    can write a 0444 file; so for root the check reads the modes instead: the keyring file and
    its directory must have no write bit. That checks the operator's intent only: a worker run
    as root can still do anything. Run the worker as its own user (docs/running.md, "Web and worker as
    different users").
    """
    problems = []
    private = Path(settings.DESK_SIGNING_KEY_FILE)
    if signing_key_reach() == READABLE:
        problems.append(f"it can read the private signing key {private} (DESK_SIGNING_KEY_FILE)")
    keyring = Path(settings.DESK_VERIFY_KEYS_FILE)
    for path in (keyring, keyring.parent):
        status = _stat(path)
        if os.geteuid() == 0:
            if status is not None and status.st_mode & 0o222:
                problems.append(
                    f"it runs as root and {path} has a write bit (mode {status.st_mode & 0o777:o})"
                )
        elif os.access(path, os.W_OK) or (status is not None and status.st_uid == os.geteuid()):
            problems.append(
                f"it can write (or chmod) {path}, where the keyring lives (DESK_VERIFY_KEYS_FILE)"
            )
    return problems


# What `signing_key_reach` answers.
ABSENT, OUT_OF_REACH, READABLE = "absent", "out of reach", "readable"


def signing_key_reach() -> str:
    """Whether this process can read DESK_SIGNING_KEY_FILE: READABLE, ABSENT, or OUT_OF_REACH (the
    file or a directory on its path denies this user). Opening it is the question itself: a worker
    must get OUT_OF_REACH or ABSENT, and a key in a directory it cannot enter is the layout that
    docs/running.md describes, not an error."""
    try:
        with Path(settings.DESK_SIGNING_KEY_FILE).open("rb"):
            return READABLE
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return ABSENT
    except PermissionError:
        return OUT_OF_REACH


def _stat(path: Path) -> os.stat_result | None:
    """`path`'s status, or None when it is missing or on a path this user cannot search."""
    try:
        return path.stat()
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return None


def device_decisions_required_everywhere() -> bool:
    """DESK_REQUIRE_DEVICE_KEYS: every approval is signed by a reviewer's device key."""
    return bool(settings.DESK_REQUIRE_DEVICE_KEYS)


def device_decision_required(*, agent: str, tool: str) -> bool:
    """Only a decision signed by the reviewer's device key may run `tool`: everywhere when
    DESK_REQUIRE_DEVICE_KEYS is on, else when the agent or the tool asks for it. The gate asks
    this (through the host) and so does the desk, which refuses a server-signed approval
    that the gate would refuse anyway."""
    if device_decisions_required_everywhere():
        return True
    try:
        return get_agent(agent).requires_device_decision(tool)
    except UnknownAgent:
        return False  # nothing of this agent can run anyway
