"""Ed25519 keys for decisions: the web tier signs, workers verify with public keys only.

Not HMAC and not django.core.signing: workers load Django settings, so anything
keyed on SECRET_KEY could be forged by a compromised worker. The private key
file is read only by `sign`; the keyring file holds public keys by key id, so
keys can rotate (add the new public key, keep the old one until its decisions
are consumed).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from django.conf import settings

from agents.canonical import canonical_json


def key_id_for(public_key: Ed25519PublicKey) -> str:
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "ed25519:" + hashlib.sha256(raw).hexdigest()[:16]


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
    key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"{path} is not an Ed25519 private key")
    return key


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
    """Base64 Ed25519 signature over the RFC 8785 canonical payload."""
    return base64.b64encode(_private_key().sign(canonical_json(payload))).decode()


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
