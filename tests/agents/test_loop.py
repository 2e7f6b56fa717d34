"""The turn loop against in-memory interfaces: no database, no Redis, no Django."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

import agents.state
from agents.loop import Failed, Finished, Waiting, advance
from agents.providers import AssistantTurn, ToolCall
from agents.providers.scripted import ScriptedProvider
from agents.registry import get_agent
from agents.state import AgentState, CallState, CallStatus, SnapshotError, Step
from agents.testing.host import InMemoryHost
from agents.testing.ledger import LedgerRow

DEMO = get_agent("demo")
ADA = "ada@example.com"

SEND_EMAIL_SCRIPT = [
    {
        "tool_calls": [
            {"name": "lookup_customer", "arguments": {"email": ADA}},
            {"name": "send_email", "arguments": {"to": ADA, "subject": "Hi", "body": "x"}},
        ]
    },
    {"content": "Done."},
]


class RecordingProvider:
    """The scripted provider, remembering the conversation it was shown at each call."""

    def __init__(self, script: list[dict[str, Any]]) -> None:
        self.inner = ScriptedProvider(script)
        self.seen: list[list[dict[str, Any]]] = []

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AssistantTurn:
        self.seen.append(copy.deepcopy(messages))
        return self.inner.complete(messages, tools)


class RawTurnsProvider:
    """Plays AssistantTurns as given, so a test can hand the loop raw argument text."""

    def __init__(self, turns: list[AssistantTurn]) -> None:
        self.turns = turns

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AssistantTurn:
        index = sum(1 for m in messages if m["role"] == "assistant")
        return self.turns[index] if index < len(self.turns) else AssistantTurn(content="Done.")


def step(host: InMemoryHost, provider) -> Any:
    return advance(agent=DEMO, provider=provider, host=host)


def tool_results(host: InMemoryHost) -> dict[str, Any]:
    return {m["tool_call_id"]: json.loads(m["content"]) for m in host.log if m["role"] == "tool"}


def count_gate_runs(host: InMemoryHost, monkeypatch) -> list[str]:
    """Spy on the gate: the tool names it was asked to execute, in order."""
    calls: list[str] = []
    execute = host.gate.execute

    def spy(**kwargs):
        calls.append(kwargs["tool"].name)
        return execute(**kwargs)

    monkeypatch.setattr(host.gate, "execute", spy)
    return calls


def assert_every_tool_call_answered_once(messages: list[dict[str, Any]]) -> None:
    """Each assistant tool call is followed by exactly one tool result, before the next assistant turn."""
    for index, message in enumerate(messages):
        if message["role"] != "assistant" or not message.get("tool_calls"):
            continue
        asked = [call["id"] for call in message["tool_calls"]]
        following = messages[index + 1 : index + 1 + len(asked)]
        assert [m["role"] for m in following] == ["tool"] * len(asked), messages
        assert [m["tool_call_id"] for m in following] == asked
        rest = messages[index + 1 + len(asked) :]
        assert not rest or rest[0]["role"] == "assistant", "only tool results may answer a tool call"


# --- running until an approval, resuming --------------------------------------------


def test_it_runs_a_call_that_needs_no_approval_at_once_and_raises_an_approval_for_send_email_then_returns_waiting_with_only_the_gated_call():
    host = InMemoryHost(run_input="Email Ada")

    outcome = step(host, ScriptedProvider(SEND_EMAIL_SCRIPT))

    assert outcome == Waiting(("call_0_1",))
    state = host.state()
    lookup, email = state.batch
    assert (lookup.status, lookup.result["name"]) == (CallStatus.DONE, "Ada Lovelace")
    assert email.status == CallStatus.AWAITING and email.result is None
    assert [(c.id, c.name, c.arguments) for c in host.approvals] == [
        ("call_0_1", "send_email", {"to": ADA, "subject": "Hi", "body": "x"})
    ]
    # The approval carries the checkpoint it was raised at, and that checkpoint exists.
    raised_at = host.approvals[0].checkpoint_id
    assert raised_at is not None and email.checkpoint_id == raised_at
    assert host.checkpoints.get(raised_at).snapshot["batch"][1]["status"] == "awaiting_approval"
    assert host.world.emails == []
    assert host.ledger.rows == {}  # a READ call with no decision leaves no ledger row
    assert [m["role"] for m in host.log] == ["system", "user", "assistant"]
    assert host.checkpoints.latest(host.run_id).message_count == len(host.log)


def test_it_resumes_after_an_approval_runs_the_tool_exactly_once_through_the_gate_and_finishes_with_the_models_final_content(
    monkeypatch,
):
    host = InMemoryHost(run_input="Email Ada")
    step(host, ScriptedProvider(SEND_EMAIL_SCRIPT))
    decision = host.approve("call_0_1")
    gate_runs = count_gate_runs(host, monkeypatch)

    outcome = step(host, ScriptedProvider(SEND_EMAIL_SCRIPT))

    assert outcome == Finished("Done.")
    assert gate_runs == ["send_email"]  # lookup_customer finished before: not run again
    assert [(e.to, e.subject, e.body) for e in host.world.emails] == [(ADA, "Hi", "x")]
    assert host.world.emails[0].idempotency_key == f"{host.run_id}:call_0_1"
    row = host.ledger.rows[f"{host.run_id}:call_0_1"]
    assert (row.status, row.decision_id, row.tool) == ("confirmed", decision.decision_id, "send_email")
    assert host.ledger.is_consumed(decision.decision_id)
    assert (
        tool_results(host)["call_0_1"]
        == row.result
        == {
            "sent": True,
            "to": ADA,
            "message_id": host.world.emails[0].message_id,
        }
    )
    assert [m["role"] for m in host.log] == ["system", "user", "assistant", "tool", "tool", "assistant"]
    assert host.log[-1]["content"] == "Done."
    assert host.state().step == Step.DONE and host.state().batch == []


def test_an_edit_runs_the_edited_arguments_and_the_model_sees_their_result():
    host = InMemoryHost()
    step(host, ScriptedProvider(SEND_EMAIL_SCRIPT))
    edited = {"to": ADA, "subject": "Hello Ada", "body": "Kinder words."}
    host.approve("call_0_1", verdict="edit", arguments=edited)

    assert step(host, ScriptedProvider(SEND_EMAIL_SCRIPT)) == Finished("Done.")

    assert [(e.subject, e.body) for e in host.world.emails] == [("Hello Ada", "Kinder words.")]


def test_a_rejection_reaches_the_model_as_that_calls_tool_result_with_the_reviewers_reason_and_the_run_continues():
    host = InMemoryHost()
    provider = RecordingProvider(SEND_EMAIL_SCRIPT)
    step(host, provider)
    host.reject("call_0_1", "Too pushy; do not email her")

    outcome = step(host, provider)

    assert outcome == Finished("Done.")
    assert host.world.emails == []
    assert f"{host.run_id}:call_0_1" not in host.ledger.rows
    rejection = {"error": "A reviewer rejected this call: Too pushy; do not email her"}
    assert tool_results(host)["call_0_1"] == rejection
    assert host.state().batch == []
    # The model was called again, and was shown the rejection as that call's result.
    assert len(provider.seen) == 2
    shown = [m for m in provider.seen[1] if m["role"] == "tool" and m["tool_call_id"] == "call_0_1"]
    assert [json.loads(m["content"]) for m in shown] == [rejection]


def test_an_approved_call_runs_while_its_undecided_sibling_keeps_the_run_waiting():
    script = [
        {
            "tool_calls": [
                {"name": "send_email", "arguments": {"to": ADA, "subject": "One", "body": "1"}},
                {"name": "send_email", "arguments": {"to": ADA, "subject": "Two", "body": "2"}},
            ]
        },
        {"content": "Both sent."},
    ]
    host = InMemoryHost()
    assert step(host, ScriptedProvider(script)) == Waiting(("call_0_0", "call_0_1"))
    host.approve("call_0_1")

    assert step(host, ScriptedProvider(script)) == Waiting(("call_0_0",))
    assert [e.subject for e in host.world.emails] == ["Two"]
    assert [m["role"] for m in host.log] == [
        "system",
        "user",
        "assistant",
    ]  # no result before the batch is whole

    host.approve("call_0_0")
    assert step(host, ScriptedProvider(script)) == Finished("Both sent.")
    assert [e.subject for e in host.world.emails] == ["Two", "One"]
    assert len(host.approvals) == 2  # resuming raised no second approval for either call


def test_a_small_refund_runs_at_once_through_the_ledger_and_a_large_one_waits_for_approval():
    script = [
        {
            "tool_calls": [
                {"name": "refund_payment", "arguments": {"order_id": "A-1002", "amount": 40}},
                {"name": "refund_payment", "arguments": {"order_id": "A-1001", "amount": 150}},
            ]
        },
        {"content": "Refunded."},
    ]
    host = InMemoryHost()

    assert step(host, ScriptedProvider(script)) == Waiting(("call_0_1",))
    assert [(r.order_id, str(r.amount)) for r in host.world.refunds] == [("A-1002", "40")]
    small = host.ledger.rows[f"{host.run_id}:call_0_0"]
    assert (small.status, small.decision_id) == ("confirmed", None)

    decision = host.approve("call_0_1")
    assert step(host, ScriptedProvider(script)) == Finished("Refunded.")
    assert [(r.order_id, str(r.amount)) for r in host.world.refunds] == [("A-1002", "40"), ("A-1001", "150")]
    assert host.ledger.rows[f"{host.run_id}:call_0_1"].decision_id == decision.decision_id


def test_every_assistant_tool_call_has_exactly_one_tool_result_message_before_the_next_model_call():
    script = [
        {
            "tool_calls": [
                {"name": "lookup_customer", "arguments": {"email": ADA}},
                {"name": "send_email", "arguments": {"to": ADA, "subject": "Hi", "body": "x"}},
            ]
        },
        {
            "tool_calls": [
                {"name": "refund_payment", "arguments": {"order_id": "A-1002", "amount": 10}},
                {"name": "no_such_tool", "arguments": {}},
                {"name": "refund_payment", "arguments": {"order_id": "A-1001", "amount": 200}},
                {"name": "send_email", "arguments": {"to": ADA}},
            ]
        },
        {"tool_calls": [{"name": "lookup_customer", "arguments": {"email": "nobody@example.com"}}]},
        {"content": "All done."},
    ]
    host = InMemoryHost()
    provider = RecordingProvider(script)

    assert step(host, provider) == Waiting(("call_0_1",))
    host.reject("call_0_1", "not now")
    assert step(host, provider) == Waiting(("call_1_2",))
    host.approve("call_1_2")
    assert step(host, provider) == Finished("All done.")

    assert len(provider.seen) == 4
    for conversation in [*provider.seen, host.log]:
        assert_every_tool_call_answered_once(conversation)
    results = tool_results(host)
    assert set(results) == {
        "call_0_0",
        "call_0_1",
        "call_1_0",
        "call_1_1",
        "call_1_2",
        "call_1_3",
        "call_2_0",
    }
    assert results["call_2_0"] == {"error": "no customer with email nobody@example.com"}  # a ToolError


@pytest.mark.parametrize(
    ("name", "raw_arguments", "error"),
    [
        pytest.param("wire_money", '{"to": "me"}', "unknown tool 'wire_money'", id="unknown tool"),
        pytest.param(
            "send_email", '{"to": "ada@example.com", "subject": ', "not valid JSON", id="malformed JSON"
        ),
        pytest.param("send_email", '{"to": "ada@example.com"}', "invalid arguments", id="missing properties"),
        pytest.param(
            "send_email",
            '{"to": "ada@example.com", "subject": "Hi", "body": "x", "bcc": "eve@example.com"}',
            "invalid arguments",
            id="extra property",
        ),
        pytest.param("send_email", '["ada@example.com", "Hi", "x"]', "invalid arguments", id="not an object"),
        pytest.param(
            "refund_payment", '{"order_id": "A-1001", "amount": -5}', "invalid arguments", id="schema bound"
        ),
        # Valid JSON text whose value has no RFC 8785 form, so no approval could ever hash or sign it.
        pytest.param(
            "refund_payment",
            '{"order_id": "A-1001", "amount": 1e400}',
            "canonical JSON",
            id="overflowing number",
        ),
        pytest.param(
            "refund_payment",
            '{"order_id": "A-1001", "amount": 9007199254740993}',
            "canonical JSON",
            id="integer beyond 2**53",
        ),
        pytest.param(
            "send_email",
            '{"to": "ada@example.com", "subject": "\\ud800", "body": "x"}',
            "canonical JSON",
            id="lone surrogate",
        ),
        pytest.param(
            "send_email",
            '{"to": "\\udfff"}',
            "canonical JSON",
            id="lone surrogate in schema-invalid arguments",
        ),
    ],
)
def test_an_unknown_tool_or_malformed_or_schema_invalid_arguments_become_an_error_tool_result_never_an_approval(
    name, raw_arguments, error
):
    provider = RawTurnsProvider(
        [AssistantTurn(content=None, tool_calls=(ToolCall(id="c1", name=name, arguments=raw_arguments),))]
    )
    host = InMemoryHost()

    outcome = step(host, provider)

    assert outcome == Finished("Done.")  # the model saw the error and carried on
    assert host.approvals == []
    assert host.world.emails == [] and host.world.refunds == []
    assert host.ledger.rows == {}
    result = tool_results(host)["call_0_0"]  # the loop's own id, not the provider's "c1"
    assert set(result) == {"error"} and error in result["error"]


def test_a_tool_call_id_reused_by_the_model_server_across_turns_still_runs_each_call():
    """Some OpenAI-compatible servers omit or repeat ids; the ledger must not mistake
    the second refund for the first and hand back its recorded result."""
    provider = RawTurnsProvider(
        [
            AssistantTurn(
                None, (ToolCall("call_0", "refund_payment", '{"order_id": "A-1002", "amount": 10}'),)
            ),
            AssistantTurn(
                None, (ToolCall("call_0", "refund_payment", '{"order_id": "G-2001", "amount": 20}'),)
            ),
        ]
    )
    host = InMemoryHost()

    assert step(host, provider) == Finished("Done.")

    assert [(r.order_id, r.amount) for r in host.world.refunds] == [("A-1002", 10), ("G-2001", 20)]
    assert len(host.ledger.rows) == 2


# --- never twice ------------------------------------------------------------------------


def test_calling_advance_again_after_finishing_changes_nothing_and_runs_no_side_effect_twice():
    host = InMemoryHost()
    provider = RecordingProvider(SEND_EMAIL_SCRIPT)
    step(host, provider)
    host.approve("call_0_1")
    assert step(host, provider) == Finished("Done.")
    log, checkpoints, model_calls = list(host.log), host.checkpoints.list(host.run_id), len(provider.seen)

    for _ in range(2):
        assert step(host, provider) == Finished("Done.")

    assert len(host.world.emails) == 1
    assert host.log == log and host.checkpoints.list(host.run_id) == checkpoints
    assert len(provider.seen) == model_calls


class Crash(Exception):
    """The worker died here."""


def test_a_second_resume_after_a_crash_before_the_step_committed_reuses_the_recorded_ledger_result(
    monkeypatch,
):
    host = InMemoryHost()
    step(host, ScriptedProvider(SEND_EMAIL_SCRIPT))
    host.approve("call_0_1")
    waiting_checkpoint = host.checkpoints.latest(host.run_id)

    def crash(**kwargs):
        raise Crash

    # The gate ran the tool and confirmed the ledger row; the worker died before committing the step.
    monkeypatch.setattr(host, "commit_step", crash)
    with pytest.raises(Crash):
        step(host, ScriptedProvider(SEND_EMAIL_SCRIPT))
    monkeypatch.undo()
    assert len(host.world.emails) == 1
    assert host.checkpoints.latest(host.run_id) == waiting_checkpoint  # still awaiting
    recorded = host.ledger.rows[f"{host.run_id}:call_0_1"].result

    assert step(host, ScriptedProvider(SEND_EMAIL_SCRIPT)) == Finished("Done.")

    assert len(host.world.emails) == 1
    assert tool_results(host)["call_0_1"] == recorded


def test_a_decision_the_gate_refuses_fails_the_run_as_an_approval_failure_without_running_the_tool():
    host = InMemoryHost()
    step(host, ScriptedProvider(SEND_EMAIL_SCRIPT))
    host.approve("call_0_1", reviewer="mallory")  # signed, but mallory may not approve this run

    outcome = step(host, ScriptedProvider(SEND_EMAIL_SCRIPT))

    assert isinstance(outcome, Failed)
    assert (outcome.kind, outcome.call_id) == ("approval", "call_0_1")
    assert "reviewer is no longer allowed" in outcome.error
    assert host.world.emails == [] and host.ledger.rows == {}


def test_a_pending_ledger_row_left_by_a_crash_goes_to_a_human_without_running_the_tool():
    host = InMemoryHost()
    step(host, ScriptedProvider(SEND_EMAIL_SCRIPT))
    decision = host.approve("call_0_1")
    key = f"{host.run_id}:call_0_1"
    host.ledger.rows[key] = LedgerRow(
        key, host.run_id, "call_0_1", "send_email", "pending", decision.decision_id, None
    )

    outcome = step(host, ScriptedProvider(SEND_EMAIL_SCRIPT))

    assert outcome == Waiting(("call_0_1",))  # waits for a reconciliation, not re-run, not failed
    assert host.ledger.rows[key].status == "unknown"
    assert host.world.emails == []
    reconcile = host.approvals[-1]
    assert (reconcile.id, reconcile.status) == ("call_0_1", CallStatus.UNKNOWN)


# --- checkpoint snapshots -------------------------------------------------------------


def waiting_host() -> InMemoryHost:
    host = InMemoryHost()
    step(host, ScriptedProvider(SEND_EMAIL_SCRIPT))
    return host


def waiting_state() -> AgentState:
    return waiting_host().state()


def test_a_checkpoint_snapshot_round_trips_through_json():
    """With the log's assistant message, from which the batch's names and arguments come (v6)."""
    host = waiting_host()
    state = host.state()

    snapshot = json.loads(json.dumps(state.to_snapshot()))

    assert snapshot["schema_version"] == agents.state.SCHEMA_VERSION
    restored = AgentState.from_snapshot(snapshot)
    restored.resolve_batch(host.log[restored.batch_position])
    assert restored == state
    assert restored.step is Step.TOOLS
    assert [type(c.status) for c in restored.batch] == [CallStatus, CallStatus]
    assert restored.batch[1].checkpoint_id == state.batch[1].checkpoint_id is not None


def test_a_snapshot_newer_than_the_code_raises_snapshot_error():
    snapshot = waiting_state().to_snapshot()
    snapshot["schema_version"] = agents.state.SCHEMA_VERSION + 1

    with pytest.raises(SnapshotError, match="newer than this code"):
        AgentState.from_snapshot(snapshot)


@pytest.mark.parametrize("version", [None, 0, "1"], ids=["missing", "zero", "a string"])
def test_a_snapshot_without_a_valid_schema_version_raises_snapshot_error(version):
    snapshot = waiting_state().to_snapshot()
    if version is None:
        del snapshot["schema_version"]
    else:
        snapshot["schema_version"] = version

    with pytest.raises(SnapshotError, match="no valid schema_version"):
        AgentState.from_snapshot(snapshot)


def test_a_snapshot_with_a_gap_in_the_migrators_raises_snapshot_error(monkeypatch):
    current = agents.state.SCHEMA_VERSION
    snapshot = waiting_state().to_snapshot()
    monkeypatch.setattr(agents.state, "SCHEMA_VERSION", current + 1)  # no migrator from current to next

    with pytest.raises(SnapshotError, match=f"no migrator from schema_version {current}"):
        AgentState.from_snapshot(snapshot)


def test_migrators_upgrade_an_old_snapshot_one_version_at_a_time(monkeypatch):
    host = waiting_host()
    state = host.state()
    old = state.to_snapshot()
    old["schema_version"] = 1
    old["calls_made"] = old.pop("model_calls")  # pretend version 1 named it differently
    seen: list[int] = []

    def v1_to_v2(snapshot):
        seen.append(snapshot["schema_version"])
        snapshot["model_calls"] = snapshot.pop("calls_made")
        return snapshot

    def v2_to_v3(snapshot):
        seen.append(snapshot["schema_version"])
        return snapshot

    monkeypatch.setattr(agents.state, "SCHEMA_VERSION", 3)
    monkeypatch.setattr(agents.state, "MIGRATORS", {1: v1_to_v2, 2: v2_to_v3})

    upgraded = AgentState.from_snapshot(old)
    upgraded.resolve_batch(host.log[upgraded.batch_position])
    assert upgraded == state
    assert seen == [1, 2]


def test_a_run_whose_latest_checkpoint_is_newer_than_the_code_does_not_advance():
    host = InMemoryHost()
    step(host, ScriptedProvider(SEND_EMAIL_SCRIPT))
    host.approve("call_0_1")
    newer = host.checkpoints.latest(host.run_id).snapshot
    newer["schema_version"] = agents.state.SCHEMA_VERSION + 1
    host.checkpoints.put(host.run_id, newer)  # as if a newer release had saved it

    with pytest.raises(SnapshotError):
        step(host, ScriptedProvider(SEND_EMAIL_SCRIPT))
    assert host.world.emails == []


def test_the_in_memory_host_keeps_its_checkpoints_apart_from_the_state_it_hands_out():
    host = InMemoryHost()
    step(host, ScriptedProvider(SEND_EMAIL_SCRIPT))
    state = host.state()
    state.batch[1].arguments["to"] = "eve@example.com"
    state.batch.append(CallState(id="x", name="send_email", arguments={}, status=CallStatus.AWAITING))

    assert host.state().batch[1].arguments["to"] == ADA
    assert len(host.state().batch) == 2
