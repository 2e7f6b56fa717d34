"""An effect interrupted between `pending` and `confirmed` goes to a human, who says
it happened (reconcile), authorises a re-run with a signed decision, or rejects it."""

from __future__ import annotations

import json

import pytest

from agents.gate import CallBinding, DecisionRefused
from agents.loop import Finished, Waiting, advance
from agents.providers.scripted import ScriptedProvider
from agents.registry import get_agent
from agents.state import CallStatus
from agents.testing.host import InMemoryHost
from agents.testing.keys import sign_decision
from agents.testing.ledger import LedgerRow

SCRIPT = [
    {
        "tool_calls": [
            {"name": "send_email", "arguments": {"to": "ada@example.com", "subject": "Hi", "body": "x"}}
        ]
    },
    {"content": "Done."},
]


def step(host):
    return advance(agent=get_agent("demo"), provider=ScriptedProvider(SCRIPT), host=host)


@pytest.fixture
def interrupted():
    """A run whose approved send_email was cut between the ledger's pending and confirmed."""
    host = InMemoryHost()
    step(host)
    decision = host.approve("call_0_0")
    key = f"{host.run_id}:call_0_0"
    host.ledger.rows[key] = LedgerRow(
        key, host.run_id, "call_0_0", "send_email", "pending", decision.decision_id, None
    )
    assert step(host) == Waiting(("call_0_0",))
    assert host.state().batch[0].status == CallStatus.UNKNOWN
    return host, key


def tool_result(host) -> dict:
    return json.loads(next(m["content"] for m in host.log if m["role"] == "tool"))


def test_a_reviewer_confirms_it_happened_and_the_recorded_result_is_used_without_running_again(interrupted):
    host, key = interrupted
    host.confirm_effect("call_0_0", result={"sent": True, "external_ref": "smtp-42"})
    assert step(host) == Finished("Done.")
    assert host.world.emails == []
    assert tool_result(host) == {"sent": True, "external_ref": "smtp-42"}
    assert host.ledger.rows[key].status == "confirmed"


def test_a_signed_rerun_runs_it_exactly_once(interrupted):
    host, key = interrupted
    decision = host.rerun("call_0_0")
    assert step(host) == Finished("Done.")
    assert len(host.world.emails) == 1
    assert host.ledger.rows[key].status == "confirmed"
    assert host.ledger.is_consumed(decision.decision_id)
    assert tool_result(host)["sent"] is True


def test_a_rejected_reconciliation_tells_the_model_and_runs_nothing(interrupted):
    host, _ = interrupted
    host.reject("call_0_0", "the customer already got it by phone")
    assert step(host) == Finished("Done.")
    assert host.world.emails == []
    assert "unknown whether it took effect" in tool_result(host)["error"]


def test_a_rerun_signed_for_the_original_approval_checkpoint_is_refused(interrupted):
    host, _ = interrupted
    first = host.approvals[0]  # the approval, raised at an older checkpoint than the reconciliation
    host.rerun("call_0_0")
    stale = host.decisions["call_0_0"]
    host.decisions["call_0_0"] = sign_decision(
        host.signing_key,
        key_id=host.key_id,
        run_id=host.run_id,
        checkpoint_id=first.checkpoint_id,
        tool_call_id="call_0_0",
        tool="send_email",
        arguments=first.arguments,
        verdict="rerun",
    )
    assert stale.payload["checkpoint_id"] != first.checkpoint_id
    outcome = step(host)
    assert "checkpoint_id differs" in outcome.error
    assert host.world.emails == []


def test_a_rerun_decision_cannot_run_a_call_that_is_not_unknown():
    host = InMemoryHost()
    step(host)
    call = host.approval("call_0_0")
    rerun = sign_decision(
        host.signing_key,
        key_id=host.key_id,
        run_id=host.run_id,
        checkpoint_id=call.checkpoint_id,
        tool_call_id="call_0_0",
        tool="send_email",
        arguments=call.arguments,
        verdict="rerun",
    )
    with pytest.raises(DecisionRefused, match="only applies"):
        host.gate.execute(
            tool=get_agent("demo").tool("send_email"),
            binding=CallBinding(host.run_id, call.checkpoint_id, "call_0_0", "send_email"),
            arguments=call.arguments,
            decision=rerun,
            ctx=host.tool_context(call),
        )
    assert host.world.emails == []


def test_a_rerun_cut_short_goes_back_to_a_human_instead_of_failing(interrupted):
    host, key = interrupted
    decision = host.rerun("call_0_0")
    # The re-run consumed its decision and reopened the ledger row, then its worker died.
    host.ledger.consume(decision.decision_id)
    host.ledger.reopen(key)
    assert step(host) == Waiting(("call_0_0",))
    assert host.ledger.rows[key].status == "unknown"
    assert [c.status for c in host.approvals].count(CallStatus.UNKNOWN) == 2  # a second reconciliation
    assert host.world.emails == []
    host.confirm_effect("call_0_0", result={"sent": True})
    assert step(host) == Finished("Done.")


def test_a_used_rerun_decision_on_an_unknown_effect_goes_back_to_a_human(interrupted):
    """Found by `make chaos`: a re-run was cut short, then the attempt that marked it unknown
    died before saving the new reconciliation, so the next attempt met the old, used decision."""
    host, key = interrupted
    decision = host.rerun("call_0_0")
    host.ledger.consume(decision.decision_id)  # the cut-short re-run used it; the row is unknown again
    assert host.ledger.rows[key].status == "unknown"
    assert step(host) == Waiting(("call_0_0",))
    assert host.world.emails == []
    assert [c.status for c in host.approvals].count(CallStatus.UNKNOWN) == 2
