"""Device keys: who vouches for a reviewer's own key, and how a worker checks it.

A device-signed decision (payload version 4, `agents.decisions`) is signed by a key the
reviewer holds: a browser's non-extractable WebCrypto key, or a key file. The server never
holds it, so neither a stolen server key nor a database writer can make one. A worker
accepts it only when

- the signature over the payload's RFC 8785 bytes verifies with the endorsed public key,
- an endorsement record names that key, is signed by a root pinned on the worker (the
  read-only trust file), names the decision's reviewer, grants the `reviewer` role and has
  not passed its `not_after`,
- and no revocation record signed by a pinned root names the key.

Records are plain dicts signed over their canonical bytes, like decisions, so the database
stores them and anyone can re-verify them; a record that does not verify under a pinned root
is ignored, whoever wrote it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from agents.canonical import canonical_json
from agents.decisions import SignedDecision, is_device_signed, key_id_for, rfc3339_signed, signature_valid

ENDORSEMENT = "device-endorsement"
REVOCATION = "device-revocation"
REVIEWER_ROLE = "reviewer"
TRUST_FILE_VERSION = 1

Roots = Mapping[str, Ed25519PublicKey]  # pinned admin public keys by key id


class DeviceRefused(Exception):
    """A device-signed decision, or a record vouching for its key, does not hold."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class TrustFileError(ValueError):
    """The pinned trust file is missing or malformed."""


@dataclass(frozen=True)
class SignedRecord:
    """An endorsement or revocation: the record, and a base64 Ed25519 signature over its
    canonical bytes by the key the record names as `signer_key_id`."""

    record: dict[str, Any]
    signature: str


class DeviceTrust(Protocol):
    """What the gate needs to verify device-signed decisions; the host implements it."""

    def roots(self) -> Roots: ...

    def records(self, key_id: str) -> tuple[Sequence[SignedRecord], Sequence[SignedRecord]]:
        """The endorsements and revocations stored for a device key id (unverified)."""
        ...

    def revoked_ids(self) -> Collection[str]:
        """Key ids the trust file itself names as revoked: a database writer cannot delete these."""
        ...


# --- keys and records -----------------------------------------------------------------------
def public_key_b64(public_key: Ed25519PublicKey) -> str:
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode()


def public_key_from_b64(encoded: str) -> Ed25519PublicKey:
    """The Ed25519 public key from its base64 raw 32 bytes; ValueError if it is not one."""
    try:
        raw = base64.b64decode(encoded, validate=True)
    except (binascii.Error, TypeError) as exc:
        raise ValueError("a public key is 32 raw bytes in base64") from exc
    if len(raw) != 32:
        raise ValueError("a public key is 32 raw bytes in base64")
    if _weak_point(raw):
        raise ValueError("not a usable Ed25519 public key: a small-order or non-canonical point")
    return Ed25519PublicKey.from_public_bytes(raw)


# --- weak keys ------------------------------------------------------------------------------
# OpenSSL takes any 32 bytes as an Ed25519 public key. For a point of small order (the
# identity, say: 0x01 and 31 zeros) one fixed signature (R the identity, S = 0) verifies every
# message, so such a key, once endorsed, lets anyone sign as its owner; as a root, it would
# sign any endorsement. The arithmetic below is RFC 8032's (section 5.1.3 decoding, extended
# coordinates), used only to refuse those keys: an encoding that is no point, one whose y is
# not reduced mod p, and a point the cofactor (8) takes to the identity.
_P = 2**255 - 19
_D = -121665 * pow(121666, _P - 2, _P) % _P
_SQRT_M1 = pow(2, (_P - 1) // 4, _P)


def _weak_point(raw: bytes) -> bool:
    """Whether `raw` is no point, a non-canonical encoding, or a point of order 1, 2, 4 or 8."""
    y = int.from_bytes(raw, "little") & ((1 << 255) - 1)
    sign = raw[31] >> 7
    if y >= _P:
        return True  # non-canonical: RFC 8032 decoding refuses it
    x = _recover_x(y, sign)
    if x is None:
        return True
    point = (x, y, 1, x * y % _P)
    for _ in range(3):  # times the cofactor, 8
        point = _double(point)
    x8, y8, z8, _t = point
    return x8 % _P == 0 and (y8 - z8) % _P == 0  # the identity (0, 1)


def _recover_x(y: int, sign: int) -> int | None:
    x2 = (y * y - 1) * pow(_D * y * y + 1, _P - 2, _P) % _P
    if x2 == 0:
        return None if sign else 0
    x = pow(x2, (_P + 3) // 8, _P)
    if (x * x - x2) % _P != 0:
        x = x * _SQRT_M1 % _P
    if (x * x - x2) % _P != 0:
        return None
    if x & 1 != sign:
        x = _P - x
    return x


def _double(point: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    x, y, z, _t = point
    a, b = x * x % _P, y * y % _P
    c = 2 * z * z % _P
    h = a + b
    e = (h - (x + y) * (x + y)) % _P
    g = (a - b) % _P
    f = (c + g) % _P
    return e * f % _P, g * h % _P, f * g % _P, e * h % _P


def fingerprint(public_key: Ed25519PublicKey) -> str:
    """The full SHA-256 of the raw public key, in groups of four hex digits, to compare by eye."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    digest = hashlib.sha256(raw).hexdigest()
    return " ".join(digest[i : i + 4] for i in range(0, len(digest), 4))


def endorsement_record(
    *,
    user: str,
    public_key: str,
    roles: Sequence[str],
    issued_at: datetime,
    not_after: datetime,
    signer_key_id: str,
) -> dict[str, Any]:
    """What an admin signs to vouch that `public_key` (base64 raw) is `user`'s, for `roles`."""
    return {
        "type": ENDORSEMENT,
        "version": 1,
        "user": user,
        "key_id": key_id_for(public_key_from_b64(public_key)),
        "public_key": public_key,
        "roles": sorted(set(roles)),
        "issued_at": rfc3339_signed(issued_at),
        "not_after": rfc3339_signed(not_after),
        "signer_key_id": signer_key_id,
    }


def revocation_record(*, key_id: str, revoked_at: datetime, signer_key_id: str) -> dict[str, Any]:
    """What an admin signs to say that the device key `key_id` must no longer be trusted."""
    return {
        "type": REVOCATION,
        "version": 1,
        "key_id": key_id,
        "revoked_at": rfc3339_signed(revoked_at),
        "signer_key_id": signer_key_id,
    }


def record_bytes(record: dict[str, Any]) -> bytes:
    return canonical_json(record)


def sign_record(private_key: Ed25519PrivateKey, record: dict[str, Any]) -> SignedRecord:
    return SignedRecord(
        record=record, signature=base64.b64encode(private_key.sign(record_bytes(record))).decode()
    )


def record_signed_by(record: SignedRecord, public_key: Ed25519PublicKey) -> bool:
    try:
        public_key.verify(base64.b64decode(record.signature, validate=True), record_bytes(record.record))
    except (InvalidSignature, binascii.Error, ValueError, TypeError):
        return False
    return True


def signed_under_root(record: SignedRecord, roots: Roots) -> bool:
    """The record's signer is a pinned root and its signature verifies under that root."""
    root = roots.get(str(record.record.get("signer_key_id")))
    return root is not None and record_signed_by(record, root)


# --- the trust file -------------------------------------------------------------------------
def trust_file_text(roots: Sequence[Mapping[str, str]], revoked: Collection[str] = ()) -> str:
    """The trust file: `{"version": 1, "roots": [{"key_id", "public_key", "user", "label"}],
    "revoked": [key ids]}`. Revoked ids pinned here hold even if the revocation rows vanish."""
    document = {"version": TRUST_FILE_VERSION, "roots": list(roots), "revoked": sorted(revoked)}
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


def load_trust_revoked(path: Path) -> frozenset[str]:
    """The device key ids the trust file names as revoked (none when it cannot be read)."""
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError):
        return frozenset()
    revoked = document.get("revoked") if isinstance(document, dict) else None
    return frozenset(str(k) for k in revoked) if isinstance(revoked, list) else frozenset()


def load_trust_file(path: Path) -> dict[str, Ed25519PublicKey]:
    """The pinned roots by key id. A root whose key id does not match its key is an error,
    not skipped: the file was edited by hand or damaged, and a worker must not guess."""
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        raise TrustFileError(f"no trust file at {path}") from None
    except (OSError, ValueError) as exc:
        raise TrustFileError(f"the trust file {path} cannot be read: {exc}") from None
    if not isinstance(document, dict) or document.get("version") != TRUST_FILE_VERSION:
        raise TrustFileError(f"the trust file {path} is not version {TRUST_FILE_VERSION}")
    roots: dict[str, Ed25519PublicKey] = {}
    for entry in document.get("roots") or []:
        try:
            key = public_key_from_b64(entry["public_key"])
        except (KeyError, TypeError, ValueError) as exc:
            raise TrustFileError(f"the trust file {path} has a bad root: {exc}") from None
        if entry.get("key_id") != key_id_for(key):
            raise TrustFileError(f"the trust file {path}: key id {entry.get('key_id')!r} is not its key's")
        roots[key_id_for(key)] = key
    if not roots:
        raise TrustFileError(f"the trust file {path} pins no root")
    return roots


# --- verifying a device-signed decision -----------------------------------------------------
def _time(record: dict[str, Any], field: str) -> datetime | None:
    try:
        value = datetime.fromisoformat(record[field])
    except (KeyError, TypeError, ValueError):
        return None
    return value if value.tzinfo is not None else None


def verify_device_decision(
    decision: SignedDecision,
    endorsements: Sequence[SignedRecord],
    revocations: Sequence[SignedRecord],
    roots: Roots,
    *,
    now: datetime,
    role: str = REVIEWER_ROLE,
    revoked_ids: Collection[str] = (),
) -> dict[str, Any]:
    """The decision's payload, once its device signature and the key's endorsement hold;
    DeviceRefused otherwise. Binding to the call, expiry of the decision itself and the
    reviewer's standing are the gate's checks, made after this one."""
    payload = decision.payload
    key_id = decision.key_id
    if not is_device_signed(payload):
        raise DeviceRefused("the decision is not marked as device-signed")
    if payload.get("key_id") != key_id:
        raise DeviceRefused("key id does not match the signed payload")
    if key_id in revoked_ids:
        raise DeviceRefused(f"device key {key_id} is revoked in the trust file")
    if any(
        r.record.get("type") == REVOCATION
        and r.record.get("key_id") == key_id
        and signed_under_root(r, roots)
        for r in revocations
    ):
        raise DeviceRefused(f"device key {key_id} has been revoked")
    naming = [
        e for e in endorsements if e.record.get("type") == ENDORSEMENT and e.record.get("key_id") == key_id
    ]
    if not naming:
        raise DeviceRefused(f"device key {key_id} has no endorsement")
    pinned = [e for e in naming if signed_under_root(e, roots)]
    if not pinned:
        raise DeviceRefused(f"device key {key_id}'s endorsement is not signed by a pinned root")
    current = [e for e in pinned if (until := _time(e.record, "not_after")) is not None and now < until]
    if not current:
        raise DeviceRefused(f"device key {key_id}'s endorsement has expired")
    endorsement = max(current, key=lambda e: str(e.record.get("issued_at"))).record
    try:
        public_key = public_key_from_b64(endorsement["public_key"])
    except (KeyError, TypeError, ValueError):
        raise DeviceRefused("the endorsement holds no valid public key") from None
    if key_id_for(public_key) != key_id:
        raise DeviceRefused("the endorsed public key is not the key the decision names")
    if not signature_valid(public_key, payload, decision.signature):
        raise DeviceRefused("device signature does not verify")
    if endorsement.get("user") != payload.get("reviewer"):
        raise DeviceRefused("the device key is endorsed for another user than the decision's reviewer")
    if role not in (endorsement.get("roles") or []):
        raise DeviceRefused(f"the device key is not endorsed for the {role} role")
    return payload


def verify_with_trust(
    trust: DeviceTrust | None, decision: SignedDecision, *, now: datetime
) -> dict[str, Any]:
    """`verify_device_decision` with the roots and records a host hands over; a worker that
    pins no roots refuses every device-signed decision rather than trust one blindly."""
    if trust is None:
        raise DeviceRefused("device-signed decision, and this worker pins no trust roots")
    endorsements, revocations = trust.records(decision.key_id)
    return verify_device_decision(
        decision, endorsements, revocations, trust.roots(), now=now, revoked_ids=trust.revoked_ids()
    )
