"""Pinned keys and the local verification of a signed decision (no I/O).

Nothing here trusts the network or the desk's copy of the arguments: the signature is checked
with a key pinned from configuration, over the exact bytes that were signed; the payload must
bind this client's ticket (desk ids, audience, external id and checkpoint, tool call) and the
hash of the arguments the framework holds now; the decision must be in date and unused here.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from reviewdesk_client.canonical import args_sha256, jcs, text_sha256
from reviewdesk_client.errors import VerificationError
from reviewdesk_client.models import VERDICTS, Ticket, Verified

KEYS_ENV = "REVIEWDESK_KEYS"
KEYS_FILE_ENV = "REVIEWDESK_KEYS_FILE"
CLOCK_SKEW = timedelta(seconds=60)

# Payload field -> Ticket attribute: what a decision must be bound to.
TICKET_BINDING = (
    ("request_id", "approval_id"),
    ("run_id", "run_id"),
    ("checkpoint_id", "checkpoint_id"),
    ("tool_call_id", "tool_call_id"),
    ("tool", "tool"),
    ("audience", "audience"),
    ("external_id", "external_id"),
    ("external_checkpoint", "external_checkpoint"),
)


class KeyRing:
    """The desk's public keys this client trusts, by key id (`{"ed25519:…": "<base64 raw 32 bytes>"}`,
    the format of the desk's DESK_VERIFY_KEYS_FILE and of `GET /api/v1/keys`)."""

    def __init__(self, keys: Mapping[str, str] | None = None) -> None:
        self._keys: dict[str, Ed25519PublicKey] = {}
        for key_id, encoded in (keys or {}).items():
            self.add(key_id, encoded)

    def add(self, key_id: str, public_key_b64: str) -> None:
        raw = base64.b64decode(public_key_b64, validate=True)
        self._keys[key_id] = Ed25519PublicKey.from_public_bytes(raw)

    def get(self, key_id: str) -> Ed25519PublicKey | None:
        return self._keys.get(key_id)

    def key_ids(self) -> list[str]:
        return sorted(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> KeyRing:
        """REVIEWDESK_KEYS (a JSON map) and/or REVIEWDESK_KEYS_FILE (a file holding one); empty
        when neither is set (every decision is then refused until keys are pinned)."""
        environ = os.environ if environ is None else environ
        ring = cls()
        if environ.get(KEYS_FILE_ENV):
            ring = ring.merged(cls.from_file(environ[KEYS_FILE_ENV]))
        if environ.get(KEYS_ENV):
            ring = ring.merged(cls(json.loads(environ[KEYS_ENV])))
        return ring

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> KeyRing:
        return cls(json.loads(Path(path).read_text()))

    @classmethod
    def from_keys_response(cls, body: Mapping[str, Any], *, include_retired: bool = True) -> KeyRing:
        """From `GET /api/v1/keys`: trust on first use (see `DeskClient.fetch_keys`)."""
        ring = cls()
        for entry in body.get("keys", ()):
            if include_retired or entry.get("status", "active") == "active":
                ring.add(entry["key_id"], entry["public_key"])
        return ring

    def merged(self, other: KeyRing) -> KeyRing:
        ring = KeyRing()
        ring._keys = {**self._keys, **other._keys}
        return ring


def verify_decision(
    decision: Mapping[str, Any],
    ticket: Ticket,
    *,
    current_arguments: Any,
    keys: KeyRing,
    consumed: Callable[[str], bool] = lambda nonce: False,
    now: datetime | None = None,
    skew: timedelta = CLOCK_SKEW,
) -> Verified:
    """Check `decision` (as the desk serves it) against the pinned `keys` and this client's
    `ticket`; `current_arguments` are the call's arguments read from the framework's restored
    state now. Returns what may run; raises VerificationError naming the first failed check.
    `consumed(nonce)` answers whether this client has consumed that nonce already."""
    payload = _signed_payload(decision, keys)
    _check_binding(payload, decision, ticket)
    verdict = payload["verdict"]
    if verdict not in VERDICTS or verdict not in ticket.verdicts:
        raise VerificationError("verdict", f"{verdict!r} is not one of {list(ticket.verdicts)}")
    if args_sha256(current_arguments) != ticket.arguments_sha256:
        raise VerificationError("arguments_changed", "the call's arguments differ from the ones submitted")
    to_run = decision.get("arguments") if verdict == "edit" else current_arguments
    if args_sha256(to_run) != payload.get("arguments_sha256"):
        raise VerificationError("binding:arguments_sha256", "the arguments to run are not the ones signed")
    not_after = _check_times(payload, now or datetime.now(UTC), skew)
    if consumed(payload["nonce"]):
        raise VerificationError("replayed", "this decision was consumed here before")
    return Verified(
        verdict=verdict,
        arguments=to_run,
        reason=decision.get("reason") or "",
        reviewer=payload.get("reviewer", ""),
        decision_id=payload["decision_id"],
        nonce=payload["nonce"],
        approval_id=ticket.approval_id,
        tool_call_id=ticket.tool_call_id,
        not_after=not_after,
        run_id=ticket.run_id,
        tool=ticket.tool,
        external_id=ticket.external_id,
    )


def _signed_payload(decision: Mapping[str, Any], keys: KeyRing) -> dict[str, Any]:
    """The payload, read from the exact bytes the pinned key signed."""
    key_id = decision.get("key_id")
    key = keys.get(key_id) if isinstance(key_id, str) else None
    if key is None:
        raise VerificationError("unpinned_key", f"key {key_id!r} is not pinned")
    served = decision.get("payload")
    if decision.get("payload_b64"):
        try:
            signed = base64.b64decode(decision["payload_b64"], validate=True)
        except (binascii.Error, ValueError, TypeError):
            raise VerificationError("payload_b64", "not base64") from None
    elif isinstance(served, dict):
        signed = jcs(served)
    else:
        raise VerificationError("payload", "the decision carries no payload")
    try:
        key.verify(base64.b64decode(decision.get("signature") or "", validate=True), signed)
    except (InvalidSignature, binascii.Error, ValueError, TypeError):
        raise VerificationError("signature", f"not {key_id}'s signature over the payload") from None
    payload = _parse_canonical(signed)
    if served is not None and served != payload:
        raise VerificationError("payload", "the payload served differs from the bytes signed")
    if payload.get("key_id") != key_id:
        raise VerificationError("binding:key_id", "the payload names another key")
    return payload


def _parse_canonical(signed: bytes) -> dict[str, Any]:
    try:
        payload = json.loads(signed)
    except (ValueError, UnicodeDecodeError):
        raise VerificationError("payload", "the signed bytes are not JSON") from None
    # Re-encoding proves the bytes were canonical: no duplicate keys or other forms to read twice.
    if not isinstance(payload, dict) or jcs(payload) != signed:
        raise VerificationError("payload", "the signed bytes are not one canonical JSON object")
    return payload


def _check_binding(payload: dict[str, Any], decision: Mapping[str, Any], ticket: Ticket) -> None:
    for field, attribute in TICKET_BINDING:
        if payload.get(field) != getattr(ticket, attribute):
            raise VerificationError(f"binding:{field}", f"the decision is for another {field}")
    if payload.get("decision_id") != decision.get("id"):
        raise VerificationError("binding:decision_id", "the payload names another decision")
    if payload.get("verdict") != decision.get("verdict"):
        raise VerificationError("binding:verdict", "the payload signs another verdict")
    if payload.get("reason_sha256") != text_sha256(decision.get("reason") or ""):
        raise VerificationError("binding:reason_sha256", "the reason is not the one signed")
    if not isinstance(payload.get("nonce"), str) or not payload["nonce"]:
        raise VerificationError("binding:nonce", "the payload has no nonce")


def _check_times(payload: dict[str, Any], now: datetime, skew: timedelta) -> datetime:
    try:
        issued_at = _rfc3339(payload["issued_at"])
        not_after = _rfc3339(payload["not_after"])
    except (KeyError, TypeError, ValueError):
        raise VerificationError("times", "issued_at / not_after missing or malformed") from None
    if issued_at > now + skew:
        raise VerificationError("not_yet_valid", "issued in the future")
    if now >= not_after:
        raise VerificationError("expired", f"valid until {payload['not_after']}")
    return not_after


def _rfc3339(text: str) -> datetime:
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if value.tzinfo is None:
        raise ValueError("naive time")
    return value
