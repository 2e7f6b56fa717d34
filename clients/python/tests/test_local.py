"""What needs no desk: key configuration, the stores' single-use takes and claims, the webhook
signature check on a hand-made delivery."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from datetime import UTC, datetime

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from reviewdesk_client import KeyRing, MemoryStore, SQLiteStore, Ticket, Verified, WebhookError
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
