"""What needs no desk: key configuration, the stores' single-use takes and claims, the webhook
signature check on a hand-made delivery."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import json
import threading
import time
from datetime import UTC, datetime

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from reviewdesk_client import (
    KeyRing,
    MemoryStore,
    SQLiteStore,
    Ticket,
    VerificationError,
    Verified,
    WebhookError,
    args_sha256,
    jcs,
    verify_decision,
)
from reviewdesk_client.canonical import text_sha256
from reviewdesk_client.delivery import parse_webhook


def public_b64() -> str:
    key = Ed25519PrivateKey.generate().public_key()
    return base64.b64encode(
        key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    ).decode()


def test_keys_from_the_environment_and_a_file(tmp_path):
    a, b = public_b64(), public_b64()
    path = tmp_path / "keys.json"
    path.write_text(json.dumps({"ed25519:b": b}))
    ring = KeyRing.from_env(
        {"REVIEWDESK_KEYS": json.dumps({"ed25519:a": a}), "REVIEWDESK_KEYS_FILE": str(path)}
    )
    assert ring.key_ids() == ["ed25519:a", "ed25519:b"]
    assert len(KeyRing.from_env({})) == 0
    with pytest.raises(ValueError):
        KeyRing({"ed25519:bad": "not base64!"})


def verified(nonce: str = "n1") -> Verified:
    return Verified(
        verdict="approve", arguments={"a": 1}, reason="", reviewer="alice", decision_id="d", nonce=nonce,
        approval_id="a", tool_call_id="call_1", not_after=datetime(2030, 1, 1, tzinfo=UTC),
    )  # fmt: skip


@pytest.fixture(params=["memory", "sqlite"])
def store(request, tmp_path):
    made = MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "s.sqlite3")
    yield made
    if isinstance(made, SQLiteStore):
        made.close()


def test_a_verified_decision_is_taken_once(store):
    store.put_verified("k", verified())
    results = []
    barrier = threading.Barrier(8)

    def take():
        barrier.wait()
        results.append(store.take_verified("k"))

    threads = [threading.Thread(target=take) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r for r in results if r is not None] == [verified()]


def test_nonce_and_handled_claims_are_single(store):
    assert store.claim_nonce("n") and not store.claim_nonce("n") and store.is_consumed("n")
    store.release_nonce("n")
    assert not store.is_consumed("n") and store.claim_nonce("n")
    assert store.claim_handled("d") and not store.claim_handled("d")


def test_tickets_and_state(store):
    ticket = Ticket(
        "ap1", "run1", "ck1", "svc", "ext", "c", "call_1", "tool", "h" * 64, ("approve", "reject")
    )
    store.put_tickets([ticket])
    assert store.ticket("ext", "call_1") == ticket == store.ticket_by_approval("ap1")
    assert store.tickets("ext") == [ticket] and store.tickets("other") == []
    store.put_state("k", "v")
    assert store.get_state("k") == "v"
    store.delete_state("k")
    assert store.get_state("k") is None


def test_the_sqlite_store_survives_a_restart(tmp_path):
    first = SQLiteStore(tmp_path / "s.sqlite3")
    first.put_verified("k", verified())
    first.claim_nonce("n")
    first.close()
    second = SQLiteStore(tmp_path / "s.sqlite3")
    assert second.take_verified("k") == verified() and second.is_consumed("n")


def test_parse_webhook_checks_hmac_and_time():
    body = json.dumps({"type": "approval.decided", "data": {}}).encode()
    t = int(time.time())
    digest = hmac.new(b"s3cret", f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    assert (
        parse_webhook({"desk-signature": f"t={t},v1={digest}"}, body, "s3cret")[0]["type"]
        == "approval.decided"
    )
    with pytest.raises(WebhookError):
        parse_webhook({"Desk-Signature": f"t={t},v1={digest}"}, body, "other")
    with pytest.raises(WebhookError):
        parse_webhook({"Desk-Signature": f"t={t},v1={digest}"}, body, "s3cret", now=t + 301)


# --- checks a desk cannot be made to fail: payloads signed here by a key the test pins ----------
TICKET = Ticket(
    "ap1", "run1", "ck1", "svc", "ext", "c", "call_1", "refund", "", ("approve", "reject", "edit")
)


def signed_decision(
    key: Ed25519PrivateKey, signer: str, arguments, *, raw: bytes | None = None, **payload_fields
):
    """A decision signed by `key` under the id `signer`; `payload_fields` override the payload's."""
    payload = {
        "decision_id": "d1", "request_id": "ap1", "run_id": "run1", "checkpoint_id": "ck1",
        "tool_call_id": "call_1", "tool": "refund", "arguments_sha256": args_sha256(arguments),
        "verdict": "approve", "reviewer": "alice", "issued_at": "2026-01-01T00:00:00Z",
        "not_after": "2999-01-01T00:00:00Z", "nonce": "n1", "key_id": signer, "audience": "svc",
        "external_id": "ext", "external_checkpoint": "c", "reason_sha256": text_sha256(""),
        **payload_fields,
    }  # fmt: skip
    data = raw if raw is not None else jcs(payload)
    return {
        "id": "d1", "verdict": payload["verdict"], "reason": "", "arguments": arguments, "key_id": signer,
        "payload_b64": base64.b64encode(data).decode(), "signature": base64.b64encode(key.sign(data)).decode(),
    }  # fmt: skip


def ring_with(key: Ed25519PrivateKey, key_id: str) -> KeyRing:
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return KeyRing({key_id: base64.b64encode(raw).decode()})


def test_a_locally_signed_decision_verifies_as_a_baseline():
    key = Ed25519PrivateKey.generate()
    ticket = dataclasses.replace(TICKET, arguments_sha256=args_sha256({"a": 1}))
    decision = signed_decision(key, "k1", {"a": 1})
    assert (
        verify_decision(decision, ticket, current_arguments={"a": 1}, keys=ring_with(key, "k1")).verdict
        == "approve"
    )


def test_a_payload_naming_another_key_than_its_signer_is_refused():
    key = Ed25519PrivateKey.generate()
    ticket = dataclasses.replace(TICKET, arguments_sha256=args_sha256({"a": 1}))
    decision = signed_decision(key, "k1", {"a": 1}, key_id="k-old")
    with pytest.raises(VerificationError, match="binding:key_id"):
        verify_decision(decision, ticket, current_arguments={"a": 1}, keys=ring_with(key, "k1"))


def test_signed_bytes_that_are_not_canonical_are_refused():
    """Duplicate keys read one way here and another elsewhere: only canonical bytes are read."""
    key = Ed25519PrivateKey.generate()
    ticket = dataclasses.replace(TICKET, arguments_sha256=args_sha256({"a": 1}))
    genuine = signed_decision(key, "k1", {"a": 1})
    canonical = base64.b64decode(genuine["payload_b64"])
    doubled = canonical[:-1] + b',"verdict":"approve"}'  # a second "verdict" key
    spaced = jcs(json.loads(canonical)).replace(b":", b": ", 1)
    for raw in (doubled, spaced):
        with pytest.raises(VerificationError, match="payload"):
            verify_decision(
                signed_decision(key, "k1", {"a": 1}, raw=raw), ticket, current_arguments={"a": 1},
                keys=ring_with(key, "k1"),
            )  # fmt: skip
