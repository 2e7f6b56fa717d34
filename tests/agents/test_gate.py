"""The approval gate against in-memory interfaces: what it refuses, and that refused means not run."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agents.decisions import SignedDecision, sign_payload
from agents.gate import (
    ApprovalGate,
    ApprovalNeeded,
    CallBinding,
    DecisionRefused,
    EffectUnknown,
    TransientFailure,
)
from agents.registry import get_agent
from agents.testing.keys import StaticKeyring, generate_signing_key, sign_decision
from agents.testing.ledger import InMemoryLedger, LedgerRow
from agents.testing.world import RecordingWorld
from agents.tools import ALWAYS, Effect, Tool, ToolContext, ToolError

DEMO = get_agent("demo")
SEND_EMAIL = DEMO.tool("send_email")
REFUND = DEMO.tool("refund_payment")
NOW = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
EMAIL_ARGS = {"to": "ada@example.com", "subject": "Hi", "body": "x"}
RUN, CHECKPOINT, CALL = "run-1", "checkpoint-1", "call_0_1"


@dataclass
class Desk:
    """One gate with its ledger, keyring and world; `decision()` signs for the call under test."""

    tool: Tool = SEND_EMAIL
    arguments: dict[str, Any] = field(default_factory=lambda: dict(EMAIL_ARGS))

    def __post_init__(self) -> None:
        self.key, self.key_id = generate_signing_key()
        self.world = RecordingWorld()
        self.ledger = InMemoryLedger(resources=[self.world])
        self.allowed = {"alice", "bob"}
        self.gate = ApprovalGate(
            keyring=StaticKeyring.of(self.key),
            ledger=self.ledger,
            reviewer_allowed=lambda reviewer, run_id, request_id: run_id == RUN and reviewer in self.allowed,
            grantor_allowed=lambda reviewer, run_id, *_: run_id == RUN and reviewer in self.allowed,
            now=lambda: NOW,
        )
        self.binding = CallBinding(
            run_id=RUN, checkpoint_id=CHECKPOINT, tool_call_id=CALL, tool=self.tool.name
        )

    @property
    def key_for_ledger(self) -> str:
        return self.binding.idempotency_key

    def decision(self, **overrides: Any) -> SignedDecision:
        private_key = overrides.pop("private_key", self.key)
        options: dict[str, Any] = {
            "key_id": self.key_id,
            "run_id": RUN,
            "checkpoint_id": CHECKPOINT,
            "tool_call_id": CALL,
            "tool": self.tool.name,
            "arguments": self.arguments,
            "issued_at": NOW - timedelta(minutes=1),
            **overrides,
        }
        return sign_decision(private_key, **options)

    def execute(self, decision: SignedDecision | None, binding: CallBinding | None = None) -> Any:
        binding = binding or self.binding
        return self.gate.execute(
            tool=self.tool,
            binding=binding,
            arguments=self.arguments,
            decision=decision,
            ctx=ToolContext(
                run_id=binding.run_id,
                tool_call_id=binding.tool_call_id,
                idempotency_key=binding.idempotency_key,
                workdir=Path("/nonexistent"),
                world=self.world,
            ),
        )

    def assert_nothing_happened(self) -> None:
        assert self.world.emails == [] and self.world.refunds == []
        assert self.key_for_ledger not in self.ledger.rows
        assert self.ledger.consumed == set()


def resigned(desk: Desk, decision: SignedDecision, **payload_changes: Any) -> SignedDecision:
    """The decision with its payload changed and signed again by the trusted key."""
    payload = {**decision.payload, **payload_changes}
    return replace(decision, payload=payload, signature=sign_payload(desk.key, payload))


def flip_a_signature_bit(signature: str) -> str:
    raw = bytearray(base64.b64decode(signature))
    raw[10] ^= 0x01
    return base64.b64encode(bytes(raw)).decode()


# Each case: (how to spoil a valid decision for the call under test, the refusal it must get).
REFUSALS = {
    "arguments changed after signing": (
        lambda d, desk: replace(d, arguments={**d.arguments, "body": "Send me your password."}),
        "arguments_sha256 differs",
    ),
    "run id tampered in the payload": (
        lambda d, desk: replace(d, payload={**d.payload, "run_id": "run-2"}),
        "signature does not verify",
    ),
    "checkpoint id tampered in the payload": (
        lambda d, desk: replace(d, payload={**d.payload, "checkpoint_id": "checkpoint-0"}),
        "signature does not verify",
    ),
    "tool call id tampered in the payload": (
        lambda d, desk: replace(d, payload={**d.payload, "tool_call_id": "call_0_0"}),
        "signature does not verify",
    ),
    "tool tampered in the payload": (
        lambda d, desk: replace(d, payload={**d.payload, "tool": "execute"}),
        "signature does not verify",
    ),
    "arguments hash tampered in the payload": (
        lambda d, desk: replace(d, payload={**d.payload, "arguments_sha256": "0" * 64}),
        "signature does not verify",
    ),
    "not_after pushed back in the payload": (
        lambda d, desk: replace(d, payload={**d.payload, "not_after": "2999-01-01T00:00:00Z"}),
        "signature does not verify",
    ),
    "signature bytes tampered": (
        lambda d, desk: replace(d, signature=flip_a_signature_bit(d.signature)),
        "signature does not verify",
    ),
    "signature not base64": (
        lambda d, desk: replace(d, signature="not base64!"),
        "signature does not verify",
    ),
    "signature empty": (lambda d, desk: replace(d, signature=""), "signature does not verify"),
    "signed by a key the keyring does not hold": (
        lambda d, desk: desk.decision(
            private_key=generate_signing_key()[0], key_id="ed25519:0123456789abcdef"
        ),
        "unknown signing key",
    ),
    "signed by an untrusted key under a trusted key id": (
        lambda d, desk: desk.decision(private_key=generate_signing_key()[0]),
        "signature does not verify",
    ),
    "key id in the payload differs from the decision's": (
        lambda d, desk: replace(desk.decision(key_id="ed25519:0123456789abcdef"), key_id=desk.key_id),
        "key id does not match",
    ),
    "signed for another run": (lambda d, desk: desk.decision(run_id="run-2"), "run_id differs"),
    "signed at another checkpoint": (
        lambda d, desk: desk.decision(checkpoint_id="checkpoint-0"),
        "checkpoint_id differs",
    ),
    "signed for another call": (
        lambda d, desk: desk.decision(tool_call_id="call_0_0"),
        "tool_call_id differs",
    ),
    "signed for another tool": (lambda d, desk: desk.decision(tool="execute"), "tool differs"),
    "signed for other arguments": (
        lambda d, desk: replace(
            desk.decision(arguments={**EMAIL_ARGS, "to": "eve@example.com"}), arguments=d.arguments
        ),
        "arguments_sha256 differs",
    ),
    "decision id swapped": (
        lambda d, desk: replace(d, decision_id="another-decision"),
        "decision_id differs",
    ),
    "a reject verdict": (lambda d, desk: desk.decision(verdict="reject"), "does not approve"),
    "a reject verdict relabelled approve outside the payload": (
        lambda d, desk: replace(desk.decision(verdict="reject"), verdict="approve"),
        "verdict differs",
    ),
    "an unknown verdict": (lambda d, desk: desk.decision(verdict="maybe"), "does not approve"),
    "expired a second ago": (lambda d, desk: desk.decision(not_after=NOW - timedelta(seconds=1)), "expired"),
    "expiring this instant": (lambda d, desk: desk.decision(not_after=NOW), "expired"),
    "not_after missing": (
        lambda d, desk: resigned(desk, d, not_after=None),
        "no valid not_after",
    ),
    "not_after not a time": (lambda d, desk: resigned(desk, d, not_after="tomorrow"), "no valid not_after"),
    "not_after without a time zone": (
        lambda d, desk: resigned(desk, d, not_after="2999-01-01T00:00:00"),
        "no valid not_after",
    ),
    "a reviewer who is not allowed": (lambda d, desk: desk.decision(reviewer="mallory"), "no longer allowed"),
}


@pytest.mark.parametrize(("spoil", "refusal"), REFUSALS.values(), ids=REFUSALS.keys())
def test_the_gate_refuses_a_spoiled_decision_and_the_tool_does_not_run(spoil, refusal):
    desk = Desk()
    decision = spoil(desk.decision(), desk)

    with pytest.raises(DecisionRefused, match=refusal):
        desk.execute(decision)

    desk.assert_nothing_happened()


def test_the_gate_refuses_a_reviewer_who_was_allowed_when_deciding_but_no_longer_is():
    desk = Desk()
    decision = desk.decision(reviewer="alice")
    desk.allowed.discard("alice")  # removed from the reviewers after signing

    with pytest.raises(DecisionRefused, match="reviewer is no longer allowed"):
        desk.execute(decision)

    desk.assert_nothing_happened()


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [(SEND_EMAIL, EMAIL_ARGS), (REFUND, {"order_id": "A-1001", "amount": 150})],
    ids=["send_email", "refund over 100"],
)
def test_the_gate_refuses_a_call_that_needs_approval_and_has_no_decision(tool, arguments):
    """ApprovalNeeded (a DecisionRefused): the loop asks a human instead of running it."""
    desk = Desk(tool=tool, arguments=dict(arguments))

    with pytest.raises(ApprovalNeeded, match="policy asks a human"):
        desk.execute(None)

    desk.assert_nothing_happened()


@pytest.mark.parametrize(
    ("tool", "arguments", "effects"),
    [
        (SEND_EMAIL, EMAIL_ARGS, lambda world: world.emails),
        (REFUND, {"order_id": "A-1001", "amount": 150}, lambda world: world.refunds),
    ],
    ids=["external: send_email", "database: refund over 100"],
)
def test_a_consumed_decision_replayed_for_the_same_call_is_refused_even_when_the_ledger_row_is_gone(
    tool, arguments, effects
):
    desk = Desk(tool=tool, arguments=dict(arguments))
    decision = desk.decision()
    desk.execute(decision)
    assert len(effects(desk.world)) == 1
    # Lose the ledger row, so nothing but the decision's single use stands in the way.
    del desk.ledger.rows[desk.key_for_ledger]

    with pytest.raises(DecisionRefused, match="already been used"):
        desk.execute(decision)

    assert len(effects(desk.world)) == 1
    assert desk.key_for_ledger not in desk.ledger.rows  # the refused attempt wrote no row


def test_a_consumed_decision_presented_for_another_call_is_refused():
    desk = Desk()
    decision = desk.decision()
    desk.execute(decision)
    other_call = replace(desk.binding, tool_call_id="call_0_2")

    with pytest.raises(DecisionRefused, match="tool_call_id differs"):
        desk.execute(decision, binding=other_call)

    assert len(desk.world.emails) == 1
    assert other_call.idempotency_key not in desk.ledger.rows


# --- what a valid decision does ---------------------------------------------------------


def test_a_valid_decision_runs_the_tool_exactly_once_and_records_it():
    desk = Desk()
    decision = desk.decision()

    result = desk.execute(decision)

    assert [(e.to, e.subject, e.body, e.idempotency_key) for e in desk.world.emails] == [
        ("ada@example.com", "Hi", "x", "run-1:call_0_1")
    ]
    assert result == {"sent": True, "to": "ada@example.com", "message_id": desk.world.emails[0].message_id}
    row = desk.ledger.rows[desk.key_for_ledger]
    assert (row.status, row.decision_id, row.result) == ("confirmed", decision.decision_id, result)
    assert desk.ledger.consumed == {decision.decision_id}


def test_an_edit_runs_the_edited_arguments_it_was_signed_for():
    desk = Desk()
    edited = {**EMAIL_ARGS, "subject": "Hello Ada"}

    desk.execute(desk.decision(verdict="edit", arguments=edited))

    assert [e.subject for e in desk.world.emails] == ["Hello Ada"]


def test_a_confirmed_ledger_entry_is_reused_without_running_the_tool_again():
    desk = Desk()
    decision = desk.decision()
    first = desk.execute(decision)

    assert desk.execute(decision) == first
    assert desk.execute(None) == first  # the recorded result answers, whatever is presented

    assert len(desk.world.emails) == 1


def test_a_pending_entry_for_an_external_tool_becomes_unknown_and_raises_effect_unknown_without_running():
    desk = Desk()
    decision = desk.decision()
    key = desk.key_for_ledger
    # A worker wrote `pending`, may have sent the email, and died before `confirmed`.
    desk.ledger.rows[key] = LedgerRow(key, RUN, CALL, "send_email", "pending", decision.decision_id, None)

    with pytest.raises(EffectUnknown):
        desk.execute(decision)
    assert desk.ledger.rows[key].status == "unknown"
    with pytest.raises(EffectUnknown):  # and it stays with a human
        desk.execute(decision)

    assert desk.world.emails == []
    assert desk.ledger.rows[key].status == "unknown"


def test_a_pending_entry_for_an_idempotent_external_tool_is_retried_with_the_same_key():
    def send(arguments: dict[str, Any], ctx: ToolContext) -> str:
        return ctx.world.send_email(**arguments, idempotency_key=ctx.idempotency_key)

    tool = replace(SEND_EMAIL, effect=Effect.IDEMPOTENT_EXTERNAL, func=send)
    desk = Desk(tool=tool)
    decision = desk.decision()
    desk.ledger.consume(decision.decision_id)  # consumed with the pending row, before the crash
    key = desk.key_for_ledger
    desk.ledger.rows[key] = LedgerRow(key, RUN, CALL, tool.name, "pending", decision.decision_id, None)

    result = desk.execute(decision)

    assert [e.idempotency_key for e in desk.world.emails] == [key]
    assert desk.ledger.rows[key].status == "confirmed" and desk.ledger.rows[key].result == result


def test_a_tool_error_in_a_database_tool_undoes_its_effect_and_records_the_error_as_the_result():
    def refund_then_fail(arguments: dict[str, Any], ctx: ToolContext) -> Any:
        ctx.world.refund(order_id="A-1001", amount=arguments["amount"], idempotency_key=ctx.idempotency_key)
        raise ToolError("the payment processor said no")

    tool = replace(REFUND, approval=ALWAYS, func=refund_then_fail)
    desk = Desk(tool=tool, arguments={"order_id": "A-1001", "amount": 150})
    decision = desk.decision()

    assert desk.execute(decision) == {"error": "the payment processor said no"}

    assert desk.world.refunds == []  # the savepoint undid the refund
    row = desk.ledger.rows[desk.key_for_ledger]
    assert (row.status, row.result) == ("confirmed", {"error": "the payment processor said no"})
    assert desk.ledger.consumed == {decision.decision_id}


def test_a_crash_inside_a_database_tool_rolls_back_the_effect_the_consumption_and_the_ledger_row_together():
    def refund_then_crash(arguments: dict[str, Any], ctx: ToolContext) -> Any:
        ctx.world.refund(order_id="A-1001", amount=arguments["amount"], idempotency_key=ctx.idempotency_key)
        raise RuntimeError("connection lost")

    tool = replace(REFUND, approval=ALWAYS, func=refund_then_crash)
    desk = Desk(tool=tool, arguments={"order_id": "A-1001", "amount": 150})
    decision = desk.decision()

    with pytest.raises(TransientFailure):  # rolled back, hence certainly undone: retried
        desk.execute(decision)

    assert desk.world.refunds == [] and desk.ledger.consumed == set()
    row = desk.ledger.rows[desk.key_for_ledger]  # only the failed try is recorded
    assert (row.status, row.retries, row.last_error) == ("retrying", 1, "RuntimeError: connection lost")
    # Nothing was committed, so the same decision can still run the call once.
    desk.tool = REFUND
    assert desk.execute(decision)["order_id"] == "A-1001"
    assert len(desk.world.refunds) == 1


def test_a_refund_of_100_or_less_needs_no_decision_and_is_recorded_in_the_ledger():
    desk = Desk(tool=REFUND, arguments={"order_id": "A-1002", "amount": 40})

    assert desk.execute(None) == {"refund_id": 1, "order_id": "A-1002", "amount": "40"}

    row = desk.ledger.rows[desk.key_for_ledger]
    assert (row.status, row.decision_id) == ("confirmed", None)


@pytest.mark.parametrize(
    ("tool", "arguments", "effects"),
    [
        (SEND_EMAIL, EMAIL_ARGS, lambda world: world.emails),
        (REFUND, {"order_id": "A-1001", "amount": 150}, lambda world: world.refunds),
    ],
    ids=["external: send_email", "database: refund over 100"],
)
def test_a_retry_of_a_call_that_needs_approval_does_not_run_without_a_decision(tool, arguments, effects):
    """A `retrying` row (an earlier try failed transiently) is no authority: a retry with no
    decision and no grant asks the policy again, which wants a human, so nothing runs."""
    desk = Desk(tool=tool, arguments=dict(arguments))
    desk.ledger.note_retry(desk.key_for_ledger, binding=desk.binding, decision_id=None, error="503")

    with pytest.raises(ApprovalNeeded, match="policy asks a human"):
        desk.execute(None)

    assert effects(desk.world) == []
    assert desk.ledger.rows[desk.key_for_ledger].status == "retrying"


def test_a_read_tool_whose_policy_asks_a_human_does_not_run_without_a_decision():
    ran: list[dict[str, Any]] = []
    tool = Tool(
        name="read_secret",
        description="",
        parameters={"type": "object"},
        effect=Effect.READ,
        func=lambda arguments, ctx: ran.append(arguments) or "secret",
        approval=ALWAYS,
    )
    desk = Desk(tool=tool, arguments={})

    with pytest.raises(ApprovalNeeded):
        desk.execute(None)

    assert ran == []
