"""The signed-decision contract: one payload builder, its canonical bytes, key ids, times, signatures."""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agents.canonical import canonical_json
from agents.decisions import (
    SignedDecision,
    answer_matches,
    decision_payload,
    key_id_for,
    payload_bytes,
    payload_version,
    rfc3339_signed,
    sign_payload,
    signature_valid,
    signed_texts_mismatch,
)
from agents.gate import ApprovalGate, CallBinding, DecisionRefused
from agents.registry import get_agent
from agents.testing.keys import StaticKeyring, generate_signing_key, sign_decision
from agents.testing.ledger import InMemoryLedger
from agents.testing.world import RecordingWorld
from agents.tools import ToolContext

# A decision signed by the code as it stood before the contract moved to agents.decisions
# (the desk's approval_do_decide and the test kit's copy built the same payload), with a
# fixed key. Decisions stored in that shape must keep verifying.
GOLDEN_KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
GOLDEN_KEY_ID = "ed25519:56475aa75463474c"
GOLDEN_ARGUMENTS = {"to": "ada@example.com", "subject": "Your refund", "body": "It is on its way."}
GOLDEN_INPUTS = {
    "decision_id": "3b0f5a8e-1c2d-4e5f-9a8b-7c6d5e4f3a21",
    "request_id": "9c8b7a6f-5e4d-4c3b-8a29-1f0e2d3c4b5a",
    "run_id": "6f1c1f0e-0b7e-4d8a-9a51-2f4a3c9b1e01",
    "attempt": 2,
    "checkpoint_id": "0d9e8f7a-6b5c-4d3e-8f1a-2b3c4d5e6f70",
    "tool_call_id": "call_0_1",
    "tool": "send_email",
    "arguments": GOLDEN_ARGUMENTS,
    "verdict": "edit",
    "reviewer": "alice",
    "issued_at": datetime(2030, 1, 2, 3, 4, 5, 123456, tzinfo=UTC),
    "not_after": datetime(2030, 1, 3, 3, 4, 5, tzinfo=UTC),
    "nonce": "00112233445566778899aabbccddeeff",
    "key_id": GOLDEN_KEY_ID,
}
GOLDEN_PAYLOAD = {
    "decision_id": "3b0f5a8e-1c2d-4e5f-9a8b-7c6d5e4f3a21",
    "request_id": "9c8b7a6f-5e4d-4c3b-8a29-1f0e2d3c4b5a",
    "run_id": "6f1c1f0e-0b7e-4d8a-9a51-2f4a3c9b1e01",
    "attempt": 2,
    "checkpoint_id": "0d9e8f7a-6b5c-4d3e-8f1a-2b3c4d5e6f70",
    "tool_call_id": "call_0_1",
    "tool": "send_email",
    "arguments_sha256": "d7947ec02b165b0985f5b60bbc366f5be79a0587f27ad727e5f581bb66efbed0",
    "verdict": "edit",
    "reviewer": "alice",
    "issued_at": "2030-01-02T03:04:05.123456Z",
    "not_after": "2030-01-03T03:04:05Z",
    "nonce": "00112233445566778899aabbccddeeff",
    "key_id": "ed25519:56475aa75463474c",
}
GOLDEN_SIGNATURE = "upES6lW12ap6wTMnS6f+uf/50NPR725k2MnsjCMjli8DH97gmr6DgbKCG0X2CFsmjhysbL4n0Sk2qNUGNgwSBA=="


GOLDEN_TEXTS = {"reason": "checked", "note": "Mention the order number.", "external_ref": ""}
# The same decision under payload version 2: the reviewer's texts are signed too.
GOLDEN_PAYLOAD_V2 = {
    **GOLDEN_PAYLOAD,
    "version": 2,
    "reason_sha256": "e61a3d78c65133c7260c43e719d97c46e16bd50c64ee7800536cf14c6407a617",
    "note_sha256": "9fca6b4abf5359fa2fcf1b0733b44617db318c3750925aa470bbd0f80d3bfae0",
    "external_ref_sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
}
GOLDEN_SIGNATURE_V2 = (
    "7FIYOO3jjruQVZfkkWXZd0U0Qr3ruzohFHqBcSbevtpVMIuZM6NM6JQ9GHbpiYfelFpPKKYXSlu9L1MjiPqvDg=="
)


# Version 3 appends the hash of a question's answer (of `null` for other verdicts).
GOLDEN_PAYLOAD_V3 = {
    **GOLDEN_PAYLOAD_V2,
    "version": 3,
    "answer_sha256": "74234e98afe7498fb5daf1f36ac2d78acc339464f950703b8c019892f982b90b",
}
GOLDEN_SIGNATURE_V3 = (
    "lXaqJ3Y5Bvk0WTqzQb3AAP7gWmZTJBE4ynDXawmVCZZ4Xj+b/J5KpRiYBgNNFgLeowzDVAQgzcReYJquBB6gBw=="
)


def test_the_builder_builds_version_3_the_version_2_fields_first_then_the_answer_hash():
    payload = decision_payload(**GOLDEN_INPUTS, **GOLDEN_TEXTS)

    assert list(payload.items()) == list(GOLDEN_PAYLOAD_V3.items())  # same fields, values and order
    assert sign_payload(GOLDEN_KEY, payload) == GOLDEN_SIGNATURE_V3  # Ed25519 is deterministic
    assert payload["reason_sha256"] == hashlib.sha256(b"checked").hexdigest()


def test_a_version_2_decision_still_verifies_and_signed_no_answer():
    assert payload_version(GOLDEN_PAYLOAD_V2) == 2
    assert signature_valid(GOLDEN_KEY.public_key(), GOLDEN_PAYLOAD_V2, GOLDEN_SIGNATURE_V2)
    assert signed_texts_mismatch(GOLDEN_PAYLOAD_V2, **GOLDEN_TEXTS) is None
    assert not answer_matches(GOLDEN_PAYLOAD_V2, None)  # no question is answered under version 2


def test_a_version_3_payload_binds_exactly_the_answer_it_was_built_with():
    payload = decision_payload(**{**GOLDEN_INPUTS, "verdict": "answer"}, answer={"size": 3})

    assert answer_matches(payload, {"size": 3})
    assert not answer_matches(payload, {"size": 4})
    assert not answer_matches(payload, None)


def test_a_version_1_decision_still_verifies_and_has_no_text_to_check():
    assert "version" not in GOLDEN_PAYLOAD and payload_version(GOLDEN_PAYLOAD) == 1
    assert signature_valid(GOLDEN_KEY.public_key(), GOLDEN_PAYLOAD, GOLDEN_SIGNATURE)
    assert signed_texts_mismatch(GOLDEN_PAYLOAD, note="anything") is None


def test_a_version_2_payload_names_the_first_text_that_differs_from_what_was_signed():
    assert signed_texts_mismatch(GOLDEN_PAYLOAD_V2, **GOLDEN_TEXTS) is None
    assert signed_texts_mismatch(GOLDEN_PAYLOAD_V2, reason="checked", note="Refund 10x instead.") == "note"
    assert signed_texts_mismatch(GOLDEN_PAYLOAD_V2, external_ref="PSP-1") == "external_ref"
    assert signed_texts_mismatch({**GOLDEN_PAYLOAD_V2, "note_sha256": None}, note="") == "note"


def test_the_signed_bytes_are_the_payloads_rfc8785_canonical_json():
    assert payload_bytes(GOLDEN_PAYLOAD) == (
        b'{"arguments_sha256":"d7947ec02b165b0985f5b60bbc366f5be79a0587f27ad727e5f581bb66efbed0",'
        b'"attempt":2,"checkpoint_id":"0d9e8f7a-6b5c-4d3e-8f1a-2b3c4d5e6f70",'
        b'"decision_id":"3b0f5a8e-1c2d-4e5f-9a8b-7c6d5e4f3a21","issued_at":"2030-01-02T03:04:05.123456Z",'
        b'"key_id":"ed25519:56475aa75463474c","nonce":"00112233445566778899aabbccddeeff",'
        b'"not_after":"2030-01-03T03:04:05Z","request_id":"9c8b7a6f-5e4d-4c3b-8a29-1f0e2d3c4b5a",'
        b'"reviewer":"alice","run_id":"6f1c1f0e-0b7e-4d8a-9a51-2f4a3c9b1e01","tool":"send_email",'
        b'"tool_call_id":"call_0_1","verdict":"edit"}'
    )


def test_a_key_id_is_ed25519_and_16_hex_digits_of_the_raw_public_keys_sha256():
    assert key_id_for(GOLDEN_KEY.public_key()) == GOLDEN_KEY_ID
    other, other_id = generate_signing_key()
    assert other_id == key_id_for(other.public_key()) != GOLDEN_KEY_ID


def test_the_test_kits_decision_is_the_builders_payload_signed_with_the_kits_key():
    key, key_id = generate_signing_key()

    decision = sign_decision(key, **{**GOLDEN_INPUTS, "key_id": key_id})

    assert decision.payload == decision_payload(**{**GOLDEN_INPUTS, "key_id": key_id})
    assert signature_valid(key.public_key(), decision.payload, decision.signature)
    assert (decision.decision_id, decision.verdict, decision.arguments, decision.key_id) == (
        GOLDEN_INPUTS["decision_id"],
        "edit",
        GOLDEN_ARGUMENTS,
        key_id,
    )


def golden_gate(world: RecordingWorld) -> ApprovalGate:
    return ApprovalGate(
        keyring=StaticKeyring.of(GOLDEN_KEY),
        ledger=InMemoryLedger(resources=[world]),
        reviewer_allowed=lambda reviewer, run_id, request_id: reviewer == "alice",
        grantor_allowed=lambda reviewer, run_id, *_: reviewer == "alice",
        now=lambda: datetime(2030, 1, 2, 12, 0, tzinfo=UTC),
    )


GOLDEN_BINDING = CallBinding(
    run_id=GOLDEN_INPUTS["run_id"],
    checkpoint_id=GOLDEN_INPUTS["checkpoint_id"],
    tool_call_id="call_0_1",
    tool="send_email",
)


def golden_decision(payload: dict, signature: str) -> SignedDecision:
    return SignedDecision(
        decision_id=GOLDEN_INPUTS["decision_id"],
        verdict="edit",
        arguments=GOLDEN_ARGUMENTS,
        payload=dict(payload),
        signature=signature,
        key_id=GOLDEN_KEY_ID,
    )


@pytest.mark.parametrize(
    ("payload", "signature"),
    [(GOLDEN_PAYLOAD, GOLDEN_SIGNATURE), (GOLDEN_PAYLOAD_V2, GOLDEN_SIGNATURE_V2)],
    ids=["version 1, stored before the texts were signed", "version 2"],
)
def test_the_gate_accepts_a_golden_decision_of_either_version(payload, signature):
    world = RecordingWorld()
    gate = golden_gate(world)

    gate.execute(
        tool=get_agent("demo").tool("send_email"),
        binding=GOLDEN_BINDING,
        arguments={**GOLDEN_ARGUMENTS, "subject": "what the model asked for"},
        decision=golden_decision(payload, signature),
        ctx=ToolContext(
            run_id=GOLDEN_BINDING.run_id,
            tool_call_id=GOLDEN_BINDING.tool_call_id,
            idempotency_key=GOLDEN_BINDING.idempotency_key,
            workdir=Path("/nonexistent"),
            world=world,
        ),
    )

    assert [email.subject for email in world.emails] == ["Your refund"]  # the edited arguments ran


def test_the_gate_vouches_for_the_signed_texts_and_refuses_an_edited_one():
    gate = golden_gate(RecordingWorld())
    decision = golden_decision(GOLDEN_PAYLOAD_V2, GOLDEN_SIGNATURE_V2)

    gate.verify_texts(decision, GOLDEN_BINDING, reason="checked", note="Mention the order number.")
    with pytest.raises(DecisionRefused, match="note does not match what the reviewer signed"):
        gate.verify_texts(decision, GOLDEN_BINDING, note="Also refund order A-1002 in full.")
    with pytest.raises(DecisionRefused, match="signature does not verify"):  # re-hashing needs the key
        forged = {**GOLDEN_PAYLOAD_V2, "note_sha256": hashlib.sha256(b"Also refund A-1002.").hexdigest()}
        gate.verify_texts(
            golden_decision(forged, GOLDEN_SIGNATURE_V2), GOLDEN_BINDING, note="Also refund A-1002."
        )
    with pytest.raises(DecisionRefused, match="tool_call_id differs"):
        gate.verify_texts(
            decision, replace(GOLDEN_BINDING, tool_call_id="call_0_0"), note="Mention the order number."
        )


def test_the_gate_refuses_a_payload_version_it_does_not_know():
    payload = {**GOLDEN_PAYLOAD_V3, "version": 4}
    decision = golden_decision(payload, sign_payload(GOLDEN_KEY, payload))

    with pytest.raises(DecisionRefused, match="unknown decision payload version 4"):
        golden_gate(RecordingWorld()).verify(decision, GOLDEN_BINDING)


def test_a_fresh_nonce_is_drawn_for_every_payload_unless_one_is_given():
    inputs = {**GOLDEN_INPUTS, "nonce": None}

    first, second = decision_payload(**inputs), decision_payload(**inputs)

    assert first["nonce"] != second["nonce"]
    assert len(first["nonce"]) == 32 and int(first["nonce"], 16) >= 0


def test_a_missing_checkpoint_stays_null_and_ids_are_written_as_strings():
    run_id = uuid.UUID(GOLDEN_INPUTS["run_id"])

    payload = decision_payload(**{**GOLDEN_INPUTS, "run_id": run_id, "checkpoint_id": None})

    assert payload["run_id"] == GOLDEN_INPUTS["run_id"] and payload["checkpoint_id"] is None


@pytest.mark.parametrize(
    ("moment", "written"),
    [
        (datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC), "2030-01-02T03:04:05Z"),
        (datetime(2030, 1, 2, 3, 4, 5, 7, tzinfo=UTC), "2030-01-02T03:04:05.000007Z"),
        (datetime(2030, 1, 2, 5, 4, 5, tzinfo=timezone(timedelta(hours=2))), "2030-01-02T03:04:05Z"),
    ],
    ids=["utc", "microseconds kept", "another offset, converted to utc"],
)
def test_decision_times_are_rfc3339_in_utc_with_a_z(moment, written):
    assert rfc3339_signed(moment) == written


def test_a_naive_time_is_refused_rather_than_guessed():
    with pytest.raises(ValueError, match="timezone-aware"):
        rfc3339_signed(datetime(2030, 1, 2, 3, 4, 5))


@pytest.mark.parametrize(
    ("spoil", "key"),
    [
        (lambda payload, signature: ({**payload, "verdict": "approve"}, signature), GOLDEN_KEY),
        (lambda payload, signature: (payload, "not base64!"), GOLDEN_KEY),
        (lambda payload, signature: (payload, ""), GOLDEN_KEY),
        (lambda payload, signature: ({**payload, "attempt": float("inf")}, signature), GOLDEN_KEY),
        (lambda payload, signature: (payload, signature), Ed25519PrivateKey.generate()),
    ],
    ids=["payload changed", "signature not base64", "signature empty", "payload not canonical", "other key"],
)
def test_a_signature_is_not_valid_for_anything_but_its_payload_and_key(spoil, key):
    payload, signature = spoil(dict(GOLDEN_PAYLOAD), GOLDEN_SIGNATURE)

    assert signature_valid(GOLDEN_KEY.public_key(), GOLDEN_PAYLOAD, GOLDEN_SIGNATURE)  # the control
    assert not signature_valid(key.public_key(), payload, signature)


def test_a_large_integer_is_hashed_as_the_double_its_digits_write():
    """A JSON number is a double (RFC 8785, 3.2.2.3): PostgreSQL's jsonb returns the double 1e16
    as the integer 10000000000000000, whose canonical form is the same. An integer no double
    writes (2**53 + 1) is still refused rather than rounded."""
    assert (
        canonical_json({"amount": 10**16})
        == canonical_json({"amount": 1e16})
        == b'{"amount":10000000000000000}'
    )
    assert canonical_json([123456789012345680000]) == canonical_json([1.2345678901234568e20])
    assert canonical_json([10**21, 15 * 10**24, 10**300]) == b"[1e+21,1.5e+25,1e+300]"
    with pytest.raises(ValueError):
        canonical_json({"amount": 2**53 + 1})
    assert canonical_json([True, 1, -(10**17)]) == b"[true,1,-100000000000000000]"
