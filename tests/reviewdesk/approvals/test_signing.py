"""The desk signs decisions with the runtime's contract: the payload `agents.decisions` builds."""

from __future__ import annotations

import pytest

from agents.decisions import decision_payload, key_id_for, signature_valid
from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.approvals.signing import FileKeyring

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("verdict", ["approve", "edit", "reject"])
def test_a_desk_decision_is_the_contracts_payload_signed_with_a_key_the_workers_keyring_holds(
    interrupted_run, personas, verdict
):
    run, approval = interrupted_run()
    edited = {**approval.arguments, "subject": "Your refund, approved"}

    decision = approval_decide(
        approval_id=approval.id,
        reviewer=personas.alice,
        verdict=verdict,
        reason="checked",
        arguments=edited if verdict == "edit" else None,
        checkpoint_id=str(approval.checkpoint_id),
    )

    decision.refresh_from_db()
    assert decision.payload == decision_payload(
        decision_id=decision.id,
        request_id=approval.id,
        run_id=run.id,
        attempt=approval.attempt.number if approval.attempt else None,
        checkpoint_id=approval.checkpoint_id,
        tool_call_id=approval.tool_call_id,
        tool=approval.tool,
        arguments=edited if verdict == "edit" else approval.arguments,
        verdict=verdict,
        reviewer="alice",
        issued_at=decision.decided_at,
        not_after=decision.not_after,
        nonce=decision.nonce,
        key_id=decision.key_id,
        reason="checked",
    )
    public_key = FileKeyring().public_key(decision.key_id)
    assert public_key is not None and key_id_for(public_key) == decision.key_id
    assert signature_valid(public_key, decision.payload, decision.signature)
