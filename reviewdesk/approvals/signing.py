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
from functools import lru_cache
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from django.conf import settings

from agents.decisions import key_id_for, sign_payload
from agents.registry import UnknownAgent, get_agent


def _write_private(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _add_to_keyring(path: Path, public_key: Ed25519PublicKey) -> None:
    keys = json.loads(path.read_text()) if path.exists() else {}
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    keys[key_id_for(public_key)] = base64.b64encode(raw).decode()
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(keys, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


@lru_cache(maxsize=1)
def _private_key() -> Ed25519PrivateKey:
    path = Path(settings.DESK_SIGNING_KEY_FILE)
    if not path.exists():
        key = Ed25519PrivateKey.generate()
        pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
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


def current_key_id() -> str:
    return key_id_for(_private_key().public_key())


def sign(payload: dict[str, Any]) -> str:
    """Base64 Ed25519 signature over the RFC 8785 canonical payload, with the desk's key."""
    return sign_payload(_private_key(), payload)


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
    if private.exists() and os.access(private, os.R_OK):
        problems.append(f"it can read the private signing key {private} (DESK_SIGNING_KEY_FILE)")
    keyring = Path(settings.DESK_VERIFY_KEYS_FILE)
    if os.geteuid() == 0:
        for path in (keyring, keyring.parent):
            if path.exists() and path.stat().st_mode & 0o222:
                problems.append(
                    f"it runs as root and {path} has a write bit (mode {path.stat().st_mode & 0o777:o})"
                )
    else:
        for path in (keyring, keyring.parent):
            if os.access(path, os.W_OK) or (path.exists() and path.stat().st_uid == os.geteuid()):
                problems.append(
                    f"it can write (or chmod) {path}, where the keyring lives (DESK_VERIFY_KEYS_FILE)"
                )
    return problems


def device_decision_required(*, agent: str, tool: str) -> bool:
    """Only a decision signed by the reviewer's device key may run `tool`: everywhere when
    DESK_REQUIRE_DEVICE_KEYS is on, else when the agent or the tool asks for it. The gate asks
    this (through the host) and so does the desk, which refuses a server-signed approval
    that the gate would refuse anyway."""
    if settings.DESK_REQUIRE_DEVICE_KEYS:
        return True
    try:
        return get_agent(agent).requires_device_decision(tool)
    except UnknownAgent:
        return False  # nothing of this agent can run anyway
