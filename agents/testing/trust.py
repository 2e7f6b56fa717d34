"""Device keys for tests: an admin root, endorsed reviewer keys, and a trust the gate can use."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from agents.decisions import key_id_for
from agents.trust import (
    REVIEWER_ROLE,
    SignedRecord,
    endorsement_record,
    public_key_b64,
    revocation_record,
    sign_record,
)


def endorse(
    root: Ed25519PrivateKey,
    device: Ed25519PrivateKey,
    *,
    user: str,
    issued_at: datetime,
    valid: timedelta = timedelta(days=30),
    roles: Sequence[str] = (REVIEWER_ROLE,),
) -> SignedRecord:
    """`root`'s endorsement of `device`'s public key as `user`'s."""
    return sign_record(
        root,
        endorsement_record(
            user=user,
            public_key=public_key_b64(device.public_key()),
            roles=roles,
            issued_at=issued_at,
            not_after=issued_at + valid,
            signer_key_id=key_id_for(root.public_key()),
        ),
    )


def revoke(root: Ed25519PrivateKey, device: Ed25519PrivateKey, *, at: datetime) -> SignedRecord:
    return sign_record(
        root,
        revocation_record(
            key_id=key_id_for(device.public_key()), revoked_at=at, signer_key_id=key_id_for(root.public_key())
        ),
    )


@dataclass
class StaticTrust:
    """Pinned roots and stored records (implements `agents.trust.DeviceTrust`)."""

    pinned: dict[str, Ed25519PublicKey] = field(default_factory=dict)
    endorsements: list[SignedRecord] = field(default_factory=list)
    revocations: list[SignedRecord] = field(default_factory=list)
    revoked: set[str] = field(default_factory=set)  # key ids pinned as revoked in the trust file

    @classmethod
    def pinning(cls, *roots: Ed25519PrivateKey) -> StaticTrust:
        return cls(pinned={key_id_for(r.public_key()): r.public_key() for r in roots})

    def roots(self) -> dict[str, Ed25519PublicKey]:
        return self.pinned

    def revoked_ids(self) -> set[str]:
        return self.revoked

    def records(self, key_id: str) -> tuple[list[SignedRecord], list[SignedRecord]]:
        return (
            [e for e in self.endorsements if e.record.get("key_id") == key_id],
            [r for r in self.revocations if r.record.get("key_id") == key_id],
        )
