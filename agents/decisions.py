"""The signed-decision contract: what a decision binds, the bytes signed, key ids, times.

A reviewer's decision reaches a worker as a payload, an Ed25519 signature over
the payload's RFC 8785 canonical JSON, and the id of the key that signed it.
The desk (`reviewdesk.approvals`) builds and signs payloads here; the gate
(`agents.gate`) verifies them here; the test kit (`agents.testing`) signs here
too. One builder, so a field cannot drift between them.

Decisions already stored were signed over exactly these fields, in this order,
with these formats: changing any of them breaks their verification.

Versions: a payload without a `version` field is version 1. Version 2 adds the
SHA-256 of the reviewer's texts that reach the model in the reviewer's name (the
reason, the steering note, the external reference), so that a text edited in the
database no longer matches what was signed. Version-1 decisions still verify;
their texts were never signed, and `signed_texts_mismatch` cannot vouch for them.
Version 3 adds `answer_sha256`, the SHA-256 of the RFC 8785 canonical answer to a
question (of `null` for every other verdict); an `answer` is only ever honoured under it.
Version 4 is version 3 signed by the reviewer's own device key (`"signer": "device"`):
the gate verifies it against the key's endorsement (`agents.trust`), not the server's keyring.

A decision on a call of an external run (an agent framework outside the desk verifies it in its
own process) binds three more fields, `EXTERNAL_BINDING`: the submitting account (`audience`), the
framework's id for the run and its checkpoint. Call ids repeat across runs and frameworks
(`call_1`): without them a decision for one agent's call would verify in another's process.
Internal payloads are unchanged.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any
from uuid import UUID

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from agents.canonical import canonical_json, sha256_hex


class Verdict(StrEnum):
    """What a signed decision says. The gate runs a call only for the approving ones."""

    APPROVE = "approve"
    REJECT = "reject"
    EDIT = "edit"  # approve, with changed arguments (the payload hashes the changed ones)
    CONFIRM = "confirm"  # an effect of unknown outcome did happen: do not run it again
    RERUN = "rerun"  # an effect of unknown outcome did not happen: run it again, once
    ANSWER = "answer"  # a question's answer: it becomes the call's result


APPROVING_VERDICTS = (Verdict.APPROVE, Verdict.EDIT)
# Authorises running again a call whose effect is unknown (its worker died mid-call).
RERUN_VERDICTS = (Verdict.RERUN,)
ANSWER_VERDICTS = (Verdict.ANSWER,)


@dataclass(frozen=True)
class SignedDecision:
    """A decision as the gate receives it."""

    decision_id: str
    verdict: str
    arguments: dict[str, Any]  # the arguments to run: the edited ones for an edit
    payload: dict[str, Any]
    signature: str  # base64
    key_id: str
    answer: Any = None  # a question's answer (verdict answer); the payload binds its hash
    # Under a quorum: the other reviewers' approvals of the same call, each signed on its own.
    # The gate verifies every one and counts distinct reviewers (ApprovalGate.verify_quorum).
    co_decisions: tuple[SignedDecision, ...] = ()


def rfc3339_signed(value: datetime) -> str:
    """RFC 3339 in UTC with a "Z", the form decision times are signed in (a zero fraction of a
    second dropped, as Python's isoformat writes it). Fixed by the signatures already made with
    it; what the desk shows and serves is `reviewdesk.lib.times.rfc3339_sortable`.

    A naive time is refused: its instant is unknown, and a guess would move a
    decision's expiry by hours.
    """
    if value.tzinfo is None:
        raise ValueError("decision times must be timezone-aware")
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


PAYLOAD_VERSION = 3
DEVICE_PAYLOAD_VERSION = 4
KNOWN_VERSIONS = (1, 2, 3, 4)
DEVICE_SIGNER = "device"
# The reviewer's texts a version-2 payload binds, each by the SHA-256 of its UTF-8 bytes.
SIGNED_TEXTS = ("reason", "note", "external_ref")
# What a decision on an external run's call binds besides (see the module docstring).
EXTERNAL_BINDING = ("audience", "external_id", "external_checkpoint")


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def payload_version(payload: dict[str, Any]) -> int | None:
    """The payload's version (1 when it has none); None for a version this code does not know."""
    version = payload.get("version", 1)
    if version == DEVICE_PAYLOAD_VERSION and payload.get("signer") != DEVICE_SIGNER:
        return None  # version 4 exists only as a device-signed payload
    return version if type(version) is int and version in KNOWN_VERSIONS else None


def signed_texts_mismatch(payload: dict[str, Any], **texts: str) -> str | None:
    """The first of `texts` (reason=, note=, external_ref=) that differs from what the payload
    signed, or None when all match. A version-1 payload signed no text: nothing can differ."""
    if payload_version(payload) == 1:
        return None
    for name, text in texts.items():
        if name not in SIGNED_TEXTS:
            raise ValueError(f"{name!r} is not a signed text")
        if payload.get(f"{name}_sha256") != text_sha256(text):
            return name
    return None


def decision_payload(
    *,
    decision_id: str | UUID,
    request_id: str | UUID,
    run_id: str | UUID,
    attempt: int | None,
    checkpoint_id: str | UUID | None,
    tool_call_id: str,
    tool: str,
    arguments: Any,
    verdict: str,
    reviewer: str,
    issued_at: datetime,
    not_after: datetime,
    nonce: str | None = None,
    key_id: str,
    reason: str = "",
    note: str = "",
    external_ref: str = "",
    answer: Any = None,
    device: bool = False,
    external: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The payload a decision's signature covers (version 3); `arguments` are the ones to run.
    With `device`, version 4: the same fields, marked as signed by the reviewer's device key.
    With `external` (a call of an external run), its `EXTERNAL_BINDING` fields too.

    It binds the decision to one request, run, attempt, checkpoint, tool call
    and tool, to the SHA-256 of the RFC 8785 canonical arguments, to a validity
    window, and to the SHA-256 of the reviewer's reason, note and external
    reference, exactly as stored. The nonce (fresh unless given) makes every
    payload unique.
    """
    payload: dict[str, Any] = {
        "decision_id": str(decision_id),
        "request_id": str(request_id),
        "run_id": str(run_id),
        "attempt": attempt,
        "checkpoint_id": None if checkpoint_id is None else str(checkpoint_id),
        "tool_call_id": tool_call_id,
        "tool": tool,
        "arguments_sha256": sha256_hex(arguments),
        "verdict": str(verdict),
        "reviewer": reviewer,
        "issued_at": rfc3339_signed(issued_at),
        "not_after": rfc3339_signed(not_after),
        "nonce": nonce if nonce is not None else secrets.token_hex(16),
        "key_id": key_id,
        "version": PAYLOAD_VERSION,
        "reason_sha256": text_sha256(reason),
        "note_sha256": text_sha256(note),
        "external_ref_sha256": text_sha256(external_ref),
        "answer_sha256": sha256_hex(answer),
    }
    if device:
        payload.update(version=DEVICE_PAYLOAD_VERSION, signer=DEVICE_SIGNER)
    if external is not None:
        payload.update({name: external[name] for name in EXTERNAL_BINDING})
    return payload


def is_device_signed(payload: dict[str, Any]) -> bool:
    """Whether the payload says its signer is the reviewer's device key (version 4)."""
    return payload_version(payload) == DEVICE_PAYLOAD_VERSION


def answer_matches(payload: dict[str, Any], answer: Any) -> bool:
    """Whether the payload signed exactly this answer. Payloads before version 3 signed none:
    no answer can match them, so a question is never answered by an older decision."""
    if payload_version(payload) in (None, 1, 2):
        return False
    return payload.get("answer_sha256") == sha256_hex(answer)


def payload_bytes(payload: dict[str, Any]) -> bytes:
    """The bytes that are signed: the payload's RFC 8785 canonical JSON."""
    return canonical_json(payload)


def key_id_for(public_key: Ed25519PublicKey) -> str:
    """A key's id: "ed25519:" and the first 16 hex digits of the raw public key's SHA-256."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "ed25519:" + hashlib.sha256(raw).hexdigest()[:16]


def sign_payload(private_key: Ed25519PrivateKey, payload: dict[str, Any]) -> str:
    """The base64 Ed25519 signature over the payload's canonical bytes."""
    return base64.b64encode(private_key.sign(payload_bytes(payload))).decode()


def signature_valid(public_key: Ed25519PublicKey, payload: dict[str, Any], signature: str) -> bool:
    """Whether `signature` (base64) is `public_key`'s signature over the payload's canonical bytes.

    Malformed input (not base64, a payload that is not canonical JSON) is simply not valid.
    """
    try:
        public_key.verify(base64.b64decode(signature, validate=True), payload_bytes(payload))
    except (InvalidSignature, binascii.Error, ValueError):
        return False
    return True
