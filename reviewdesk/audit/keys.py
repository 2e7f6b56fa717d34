"""The audit trail's two keys, both kept outside the database.

- The chain key (HMAC-SHA256): every process that writes audit rows needs it,
  web tier and workers alike. A database writer without it cannot recompute
  a keyed row's hash, so an edit or a deletion shows even when the attacker
  rewrites the chain.
- The anchor key (Ed25519) signs the chain heads appended to the anchor file.
  A dedicated key, not the decision signing key: beat's anchor task runs on a
  worker, and workers must hold no key that signs decisions. Verifiers need
  only its public key (DESK_AUDIT_ANCHOR_KEYS_FILE), so the audit page can check
  anchors without being able to write them.
"""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from django.conf import settings

from agents.decisions import key_id_for
from reviewdesk.conf import var
from reviewdesk.lib.deployment import is_production_configuration


class AuditKeyMissing(RuntimeError):
    """The chain key is neither in the environment nor in its file."""


def audit_key(*, create: bool = True) -> bytes:
    """The chain's HMAC key: $DESK_AUDIT_KEY, else DESK_AUDIT_KEY_FILE (created 0600 if `create`).

    A verifier passes create=False: a fresh key would make every keyed row look forged. So does
    a production configuration (`is_production_configuration`), writers too: a key one host
    made would be that host's alone, and its rows would fail verification on every other (the
    web tier's, the workers', `verify_audit`'s). There the key is provided, or nothing is
    audited, and so nothing done; the embedded default and the tests make theirs in var/.
    """
    if settings.DESK_AUDIT_KEY:
        return settings.DESK_AUDIT_KEY.encode()
    path = Path(settings.DESK_AUDIT_KEY_FILE)
    if create and is_production_configuration():
        try:
            return _key_from_file(path, False)
        except AuditKeyMissing:
            raise AuditKeyMissing(
                f"no audit key in a production configuration: set DESK_AUDIT_KEY, or provide "
                f"{path} (DESK_AUDIT_KEY_FILE), the same key on every host that writes or verifies "
                "the audit trail; none is generated here, as its rows would verify on this host only"
            ) from None
    return _key_from_file(path, create)


def audit_key_problem() -> str | None:
    """Why this process, in a production configuration, could write no audit row (and so do
    nothing it audits): its key is neither in DESK_AUDIT_KEY nor in a readable
    DESK_AUDIT_KEY_FILE. None when it has one, and outside production, where `audit_key` makes
    its own on first use. The web process, the workers and the system check ask this at start
    (reviewdesk/asgi.py, runs/tasks.py, audit/checks.py) rather than at the first write."""
    if not is_production_configuration():
        return None
    try:
        audit_key()
    except AuditKeyMissing as exc:
        return str(exc)
    except OSError as exc:
        return f"cannot read the audit key {settings.DESK_AUDIT_KEY_FILE} (DESK_AUDIT_KEY_FILE): {exc}"
    return None


@lru_cache(maxsize=4)
def _key_from_file(path: Path, create: bool) -> bytes:
    if not create and not path.exists():
        raise AuditKeyMissing(f"no audit key: set DESK_AUDIT_KEY or provide {path}")
    return var.read_or_create_secret(path, nbytes=32).encode()


# Where the chain's unkeyed (legacy) rows end, recorded outside the database the first time
# this code writes a keyed row: 0 on a deployment that never had any. Without it, a database
# writer could rewrite the whole chain as "legacy" rows until the first anchor pins it.
_plain_boundary_known: set[Path] = set()


def plain_boundary_path() -> Path:
    return Path(settings.DESK_AUDIT_PLAIN_UNTIL_FILE)


def record_plain_boundary(last_plain_id: Callable[[], int]) -> None:
    """Write the boundary once per deployment (the first writer wins; later calls are a stat)."""
    path = plain_boundary_path()
    if path in _plain_boundary_known:
        return
    if not path.exists():
        with contextlib.suppress(FileExistsError):
            _write_private(path, f"{last_plain_id()}\n".encode())
    _plain_boundary_known.add(path)


def plain_boundary() -> int | None:
    """The last row id that may be unkeyed, or None where no boundary was ever recorded."""
    try:
        return int(plain_boundary_path().read_text().strip())
    except FileNotFoundError:
        return None
    except ValueError:
        return 0  # unreadable: trust no unkeyed row


def _write_private(path: Path, data: bytes) -> None:
    """Create it whole or raise FileExistsError: a racing reader never sees it half written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    var.create_private(path, data)


def _publish(public_key: Ed25519PublicKey) -> None:
    path = Path(settings.DESK_AUDIT_ANCHOR_KEYS_FILE)
    keys = json.loads(path.read_text()) if path.exists() else {}
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    keys[key_id_for(public_key)] = base64.b64encode(raw).decode()
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(keys, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


class AnchorKeyMissing(Exception):
    """No anchor signing key here, and this caller may not make one."""


def anchor_private_key(*, create: bool = True) -> Ed25519PrivateKey:
    """The anchor signing key, created on first use with its public key published (`create`;
    else AnchorKeyMissing: a host that should not sign anchors must not become one that can)."""
    path = Path(settings.DESK_AUDIT_ANCHOR_KEY_FILE)
    if not path.exists() and not create:
        raise AnchorKeyMissing(
            f"no anchor key at {path} (DESK_AUDIT_ANCHOR_KEY_FILE): run this where beat's worker runs"
        )
    if not path.exists():
        key = Ed25519PrivateKey.generate()
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        with contextlib.suppress(FileExistsError):  # another process won the race: use its key
            _write_private(path, pem)
    loaded = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(loaded, Ed25519PrivateKey):
        raise ValueError(f"{path} is not an Ed25519 private key")
    if key_id_for(loaded.public_key()) not in anchor_public_keys():
        _publish(loaded.public_key())
    return loaded


def anchor_public_keys() -> dict[str, Ed25519PublicKey]:
    """Public keys that verify anchors, by key id."""
    path = Path(settings.DESK_AUDIT_ANCHOR_KEYS_FILE)
    try:
        keys = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    return {key_id: Ed25519PublicKey.from_public_bytes(base64.b64decode(raw)) for key_id, raw in keys.items()}
