"""Device-signed decisions through the gate (runtime only, no Django): each refusal runs nothing."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agents.decisions import (
    SignedDecision,
    decision_payload,
    is_device_signed,
    key_id_for,
    payload_version,
    sign_payload,
)
from agents.gate import ApprovalGate, DecisionRefused
from agents.testing.keys import StaticKeyring
from agents.testing.trust import StaticTrust, endorse, revoke
from agents.trust import (
    TrustFileError,
    load_trust_file,
    public_key_b64,
    trust_file_text,
    verify_device_decision,
)
from tests.agents.test_gate import NOW, Desk


class DeviceDesk(Desk):
    """A desk whose send_email requires device keys: an admin root pinned, alice's key endorsed."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.root = Ed25519PrivateKey.generate()
        self.alice_device = Ed25519PrivateKey.generate()
        self.trust = StaticTrust.pinning(self.root)
        self.trust.endorsements.append(
            endorse(self.root, self.alice_device, user="alice", issued_at=NOW - timedelta(days=1))
        )
        self.gate = ApprovalGate(
            keyring=StaticKeyring.of(self.key),
            ledger=self.ledger,
            reviewer_allowed=self.gate.reviewer_allowed,
            grantor_allowed=self.gate.grantor_allowed,
            now=lambda: NOW,
            device_trust=self.trust,
            device_required=lambda tool: tool == "send_email",
        )

    def device_decision(self, device: Ed25519PrivateKey | None = None, **overrides: Any) -> SignedDecision:
        device = device or self.alice_device
        return self.decision(
            private_key=device, key_id=key_id_for(device.public_key()), device=True, **overrides
        )

    def refused(self, decision: SignedDecision, reason: str) -> None:
        with pytest.raises(DecisionRefused, match=reason):
            self.execute(decision)
        self.assert_nothing_happened()


@pytest.fixture
def desk() -> DeviceDesk:
    return DeviceDesk()


def test_a_device_signed_decision_is_version_4_and_marked() -> None:
    """Version 4 is version 3 (with its answer hash) marked device-signed; unmarked it is unknown."""
    desk = DeviceDesk()
    payload = desk.device_decision().payload
    assert payload_version(payload) == 4 and payload["signer"] == "device" and is_device_signed(payload)
    assert "answer_sha256" in payload
    server = desk.decision().payload
    assert payload_version(server) == 3 and not is_device_signed(server)
    assert payload_version({**payload, "signer": "server"}) is None
    assert payload_version({**server, "signer": "device"}) == 3  # only version 4 means a device


def device_answer(desk: DeviceDesk, answer: Any, *, device: bool = True) -> SignedDecision:
    """A question's answer, signed by alice's device key (or, without `device`, the server's)."""
    signer = desk.alice_device if device else desk.key
    key_id = key_id_for(signer.public_key())
    decision = desk.decision(verdict="answer", key_id=key_id)
    payload = decision_payload(
        decision_id=decision.decision_id,
        request_id="request-1",
        run_id=decision.payload["run_id"],
        attempt=1,
        checkpoint_id=decision.payload["checkpoint_id"],
        tool_call_id=decision.payload["tool_call_id"],
        tool="ask_human",
        arguments=desk.arguments,
        verdict="answer",
        reviewer="alice",
        issued_at=NOW - timedelta(minutes=1),
        not_after=NOW + timedelta(hours=1),
        key_id=key_id,
        answer=answer,
        device=device,
    )
    return replace(decision, payload=payload, signature=sign_payload(signer, payload), answer=answer)


def test_a_device_signed_answer_to_a_question_is_the_result_and_a_server_signed_one_is_refused() -> None:
    from agents.registry import get_agent

    question = {"question": "Which colour?", "options": ["red", "blue"]}
    desk = DeviceDesk(tool=get_agent("demo").tool("ask_human"), arguments=question)
    desk.gate.device_required = lambda tool: tool == "ask_human"
    with pytest.raises(DecisionRefused, match="requires a decision signed by the reviewer's device key"):
        desk.execute(device_answer(desk, "blue", device=False))
    with pytest.raises(DecisionRefused, match="does not match what the reviewer signed"):
        desk.execute(replace(device_answer(desk, "blue"), answer="red"))
    decision = device_answer(desk, "blue")
    assert desk.execute(decision) == "blue"
    assert desk.ledger.consumed == {decision.decision_id}


def test_the_gate_runs_a_call_approved_with_alices_endorsed_device_key(desk: DeviceDesk) -> None:
    desk.execute(desk.device_decision())
    assert [e.to for e in desk.world.emails] == ["ada@example.com"]


def test_a_device_required_tool_refuses_a_server_signed_decision(desk: DeviceDesk) -> None:
    desk.refused(desk.decision(), "requires a decision signed by the reviewer's device key")


def test_a_tool_that_does_not_require_device_keys_still_takes_a_server_signed_one() -> None:
    desk = DeviceDesk()
    desk.gate.device_required = lambda tool: False
    desk.execute(desk.decision())
    assert len(desk.world.emails) == 1


def test_a_key_swapped_for_another_is_refused(desk: DeviceDesk) -> None:
    """The database's copy of alice's key replaced by mallory's: the endorsement still names
    alice's key, so mallory's key has none; and an endorsement edited to name it no longer verifies."""
    mallory = Ed25519PrivateKey.generate()
    desk.refused(desk.device_decision(mallory), "has no endorsement")
    forged = desk.trust.endorsements[0]
    edited = {
        **forged.record,
        "public_key": public_key_b64(mallory.public_key()),
        "key_id": key_id_for(mallory.public_key()),
    }
    desk.trust.endorsements.append(replace(forged, record=edited))
    desk.refused(desk.device_decision(mallory), "not signed by a pinned root")


def test_an_endorsed_key_id_with_another_public_key_is_refused(desk: DeviceDesk) -> None:
    """An endorsement whose key id was edited to point at a public key it does not hold."""
    mallory = Ed25519PrivateKey.generate()
    record = dict(desk.trust.endorsements[0].record, key_id=key_id_for(mallory.public_key()))
    desk.trust.endorsements.append(endorse(desk.root, desk.alice_device, user="alice", issued_at=NOW))
    desk.trust.endorsements[-1] = type(desk.trust.endorsements[-1])(record=record, signature="")
    from agents.trust import sign_record

    desk.trust.endorsements[-1] = sign_record(desk.root, record)
    desk.refused(desk.device_decision(mallory), "endorsed public key is not the key the decision names")


def test_an_endorsement_signed_by_an_unpinned_key_is_refused(desk: DeviceDesk) -> None:
    stranger, bob_device = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    desk.trust.endorsements.append(
        endorse(stranger, bob_device, user="bob", issued_at=NOW - timedelta(hours=1))
    )
    desk.refused(desk.device_decision(bob_device, reviewer="bob"), "not signed by a pinned root")


def test_a_revoked_key_is_refused(desk: DeviceDesk) -> None:
    desk.trust.revocations.append(revoke(desk.root, desk.alice_device, at=NOW - timedelta(minutes=5)))
    desk.refused(desk.device_decision(), "has been revoked")


def test_a_revocation_signed_by_an_unpinned_key_is_ignored(desk: DeviceDesk) -> None:
    desk.trust.revocations.append(revoke(Ed25519PrivateKey.generate(), desk.alice_device, at=NOW))
    desk.execute(desk.device_decision())
    assert len(desk.world.emails) == 1


def test_an_expired_endorsement_is_refused() -> None:
    desk = DeviceDesk()
    desk.trust.endorsements[:] = [
        endorse(desk.root, desk.alice_device, user="alice", issued_at=NOW - timedelta(days=31))
    ]
    desk.refused(desk.device_decision(), "endorsement has expired")


def test_a_device_signature_over_different_arguments_is_refused(desk: DeviceDesk) -> None:
    decision = desk.device_decision()
    desk.refused(
        replace(decision, arguments={**decision.arguments, "to": "mallory@example.com"}),
        "arguments_sha256 differs",
    )
    other = {**decision.payload, "arguments_sha256": "0" * 64}
    desk.refused(replace(decision, payload=other), "device signature does not verify")


def test_a_key_endorsed_for_bob_cannot_sign_alices_decision(desk: DeviceDesk) -> None:
    bob_device = Ed25519PrivateKey.generate()
    desk.trust.endorsements.append(endorse(desk.root, bob_device, user="bob", issued_at=NOW))
    desk.refused(desk.device_decision(bob_device, reviewer="alice"), "endorsed for another user")


def test_a_key_endorsed_without_the_reviewer_role_is_refused(desk: DeviceDesk) -> None:
    desk.trust.endorsements[:] = [
        endorse(desk.root, desk.alice_device, user="alice", issued_at=NOW, roles=("admin",))
    ]
    desk.refused(desk.device_decision(), "not endorsed for the reviewer role")


def test_the_payload_key_id_must_be_the_decisions(desk: DeviceDesk) -> None:
    decision = desk.device_decision()
    payload = {**decision.payload, "key_id": "ed25519:0000000000000000"}
    desk.refused(
        replace(decision, payload=payload, signature=sign_payload(desk.alice_device, payload)),
        "key id does not match",
    )


def test_a_worker_pinning_no_roots_refuses_device_decisions(desk: DeviceDesk) -> None:
    desk.gate.device_trust = None
    desk.refused(desk.device_decision(), "pins no trust roots")


def test_the_server_key_cannot_pass_for_a_device_key(desk: DeviceDesk) -> None:
    """The server signs a payload marked device-signed with its own key: no endorsement names it."""
    desk.refused(desk.decision(device=True), "has no endorsement")


def test_verify_refuses_an_unmarked_payload(desk: DeviceDesk) -> None:
    from agents.trust import DeviceRefused

    with pytest.raises(DeviceRefused, match="not marked as device-signed"):
        verify_device_decision(desk.decision(), desk.trust.endorsements, [], desk.trust.pinned, now=NOW)


def test_the_trust_file_round_trips_and_refuses_damage(tmp_path: Path) -> None:
    root = Ed25519PrivateKey.generate()
    key_id = key_id_for(root.public_key())
    path = tmp_path / "trust.json"
    path.write_text(
        trust_file_text(
            [{"key_id": key_id, "public_key": public_key_b64(root.public_key()), "user": "admin"}]
        )
    )
    assert list(load_trust_file(path)) == [key_id]
    path.write_text(
        trust_file_text(
            [{"key_id": "ed25519:0000000000000000", "public_key": public_key_b64(root.public_key())}]
        )
    )
    with pytest.raises(TrustFileError, match="is not its key's"):
        load_trust_file(path)
    path.write_text(trust_file_text([]))
    with pytest.raises(TrustFileError, match="pins no root"):
        load_trust_file(path)
    with pytest.raises(TrustFileError, match="no trust file"):
        load_trust_file(tmp_path / "missing.json")


def test_a_key_revoked_in_the_trust_file_is_refused_without_any_record(desk: DeviceDesk) -> None:
    desk.trust.revoked.add(key_id_for(desk.alice_device.public_key()))
    desk.refused(desk.device_decision(), "is revoked in the trust file")


def test_under_a_quorum_every_vote_must_be_device_signed_where_device_keys_are_required() -> None:
    from tests.agents.test_quorum_gate import TWO_PERSON_EMAIL

    desk = DeviceDesk(tool=TWO_PERSON_EMAIL)
    bob_device = Ed25519PrivateKey.generate()
    desk.trust.endorsements.append(
        endorse(desk.root, bob_device, user="bob", issued_at=NOW - timedelta(days=1))
    )
    bobs = desk.device_decision(bob_device, reviewer="bob")
    desk.refused(replace(bobs, co_decisions=(desk.decision(reviewer="alice"),)), "requires a decision signed")
    alices = desk.device_decision(reviewer="alice")
    desk.execute(replace(bobs, co_decisions=(alices,)))
    assert len(desk.world.emails) == 1
    assert desk.ledger.consumed == {alices.decision_id, bobs.decision_id}


def test_a_standing_grant_never_allows_a_tool_that_requires_device_keys() -> None:
    """A grant is signed by the server's key: where a device must sign, the gate refuses it
    (the loop then asks a reviewer) and nothing runs."""
    from agents.gate import GrantRefused
    from tests.agents.test_grants import Gate

    desk = Gate()
    grant = desk.grant()
    desk.gate.device_required = lambda tool: tool == "send_email"
    with pytest.raises(GrantRefused, match="requires a decision signed by the reviewer's device key"):
        desk.run(grant)
    assert desk.world.emails == [] and desk.ledger.rows == {} and desk.ledger.grant_uses == {}
    desk.gate.device_required = lambda tool: False
    assert desk.run(grant)["sent"] is True
