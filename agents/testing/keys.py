"""Signing keys, a keyring and signed decisions, for tests: decisions signed as the desk signs them.

The payload comes from `agents.decisions.decision_payload`, the builder the desk
uses, so a decision signed here is one the desk could have issued.
"""

from __future__ import annotations

import copy
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from agents.canonical import sha256_hex
from agents.decisions import SignedDecision, Verdict, decision_payload, key_id_for, sign_payload
from agents.grants import GrantScope, SignedGrant, grant_payload

DEFAULT_DECISION_VALID = timedelta(hours=24)  # the desk's DESK_DECISION_VALID_SECONDS default


def generate_signing_key() -> tuple[Ed25519PrivateKey, str]:
    """A fresh Ed25519 private key and its key id."""
    key = Ed25519PrivateKey.generate()
    return key, key_id_for(key.public_key())


class StaticKeyring:
    """Public keys by key id (implements `agents.gate.Keyring`)."""

    def __init__(self, keys: dict[str, Ed25519PublicKey] | None = None) -> None:
        self.keys: dict[str, Ed25519PublicKey] = dict(keys or {})

    @classmethod
    def of(cls, *private_keys: Ed25519PrivateKey) -> StaticKeyring:
        """A keyring holding the public halves of these keys, under their desk key ids."""
        return cls({key_id_for(k.public_key()): k.public_key() for k in private_keys})

    def public_key(self, key_id: str) -> Ed25519PublicKey | None:
        return self.keys.get(key_id)


def sign_decision(
    private_key: Ed25519PrivateKey,
    *,
    key_id: str,
    run_id: str,
    checkpoint_id: str | None,
    tool_call_id: str,
    tool: str,
    arguments: dict[str, Any],
    verdict: str = Verdict.APPROVE,
    reviewer: str = "alice",
    not_after: datetime | None = None,
    decision_id: str | None = None,
    request_id: str | None = None,
    attempt: int | None = 1,
    issued_at: datetime | None = None,
    nonce: str | None = None,
    device: bool = False,
) -> SignedDecision:
    """A decision signed like the desk signs it; `arguments` are the ones to run.

    For an edit, pass the edited arguments. Times must be timezone-aware. With `device`, the
    payload is marked as signed by the reviewer's device key (version 4, `agents.trust`).
    """
    issued_at = issued_at or datetime.now(UTC)
    not_after = not_after or issued_at + DEFAULT_DECISION_VALID
    decision_id = decision_id or str(uuid.uuid4())
    payload = decision_payload(
        decision_id=decision_id,
        request_id=request_id or str(uuid.uuid4()),
        run_id=run_id,
        attempt=attempt,
        checkpoint_id=checkpoint_id,
        tool_call_id=tool_call_id,
        tool=tool,
        arguments=arguments,
        verdict=verdict,
        reviewer=reviewer,
        issued_at=issued_at,
        not_after=not_after,
        nonce=nonce,
        key_id=key_id,
        device=device,
    )
    return SignedDecision(
        decision_id=decision_id,
        verdict=str(verdict),
        arguments=copy.deepcopy(arguments),
        payload=payload,
        signature=sign_payload(private_key, payload),
        key_id=key_id,
    )


def sign_grant(
    private_key: Ed25519PrivateKey,
    *,
    key_id: str,
    tool: str,
    agent: str = "demo",
    scope: str = GrantScope.RUN,
    run_id: str | None = None,
    arguments: dict[str, Any] | None = None,
    constraints: dict[str, Any] | None = None,
    max_uses: int = 10,
    expires_at: datetime | None = None,
    granted_by: str = "alice",
    grant_id: str | None = None,
) -> SignedGrant:
    """A standing grant signed like the desk signs it: exact (`arguments`) or a pattern
    (`constraints`); `run_id` for scope run."""
    issued_at = datetime.now(UTC)
    grant_id = grant_id or str(uuid.uuid4())
    payload = grant_payload(
        grant_id=grant_id,
        tool=tool,
        agent=agent,
        scope=scope,
        run_id=run_id if scope == GrantScope.RUN else None,
        arguments_sha256=None if arguments is None else sha256_hex(arguments),
        constraints=constraints,
        max_uses=max_uses,
        issued_at=issued_at,
        expires_at=expires_at or issued_at + timedelta(hours=1),
        granted_by=granted_by,
        approval_id=str(uuid.uuid4()),
        key_id=key_id,
    )
    return SignedGrant(
        grant_id=grant_id, payload=payload, signature=sign_payload(private_key, payload), key_id=key_id
    )
