"""Snapshot v6: a checkpoint's open batch refers to the log's assistant message for its calls'
names and arguments, and a resume reads them back from there, checked, or refuses to run."""

from __future__ import annotations

import copy
import json

import pytest

from agents.loop import Finished, Waiting, advance
from agents.providers.scripted import ScriptedProvider
from agents.registry import get_agent
from agents.state import SCHEMA_VERSION, AgentState, CallState, CallStatus, LoggedCall, SnapshotError, Step
from agents.testing.host import InMemoryHost

DEMO = get_agent("demo")
ADA = "ada@example.com"
EMAIL = {"to": ADA, "subject": "Hi", "body": "x"}
REFUND = {"order_id": "A-1001", "amount": 150}
SCRIPT = [
    {
        "tool_calls": [
            {"name": "lookup_customer", "arguments": {"email": ADA}},
            {"name": "send_email", "arguments": EMAIL},
            {"name": "refund_payment", "arguments": REFUND},
        ]
    },
    {"content": "Done."},
]


def step(host: InMemoryHost) -> object:
    return advance(agent=DEMO, provider=ScriptedProvider(SCRIPT), host=host)


def waiting_host(run_id: str | None = None) -> InMemoryHost:
    """A run waiting on send_email and refund_payment; lookup_customer already ran."""
    host = InMemoryHost(run_id=run_id)
    assert step(host) == Waiting(("call_0_1", "call_0_2"))
    return host


def latest(host: InMemoryHost) -> dict:
    return host.checkpoints.latest(host.run_id).snapshot


def replace_latest(host: InMemoryHost, snapshot: dict) -> None:
    """Make `snapshot` the run's latest checkpoint, as another worker or release wrote it."""
    host.checkpoints.put(host.run_id, snapshot)


def effects(host: InMemoryHost) -> tuple:
    """What the run did to the world and the ledger: keys, tools, results, arguments."""
    ledger = sorted(
        (row.key, row.tool, row.status, json.dumps(row.result)) for row in host.ledger.rows.values()
    )
    emails = [(e.to, e.subject, e.body, e.idempotency_key) for e in host.world.emails]
    refunds = [(r.order_id, r.amount, r.idempotency_key) for r in host.world.refunds]
    return ledger, emails, refunds


def as_v5(snapshot: dict, host: InMemoryHost) -> dict:
    """The same checkpoint as v5 code wrote it: every call whole, the step written out."""
    state = AgentState.from_snapshot(snapshot)
    state.resolve_batch(host.log[state.batch_position])
    state.batch_message = None  # unknown to v5: each call is written whole
    whole = state.to_snapshot()
    return {**whole, "step": "tools", "schema_version": 5}


def test_a_checkpoint_with_an_open_batch_holds_each_calls_id_and_state_not_what_the_log_says():
    host = waiting_host()
    snapshot = latest(host)
    assert snapshot["schema_version"] == SCHEMA_VERSION == 6
    assert "step" not in snapshot  # an open batch means the tools step
    checkpoint_id = snapshot["batch"][1]["checkpoint_id"]
    assert snapshot["batch"] == [
        {"id": "call_0_0", "status": "done", "result": snapshot["batch"][0]["result"]},
        {"id": "call_0_1", "status": "awaiting_approval", "checkpoint_id": checkpoint_id},
        {"id": "call_0_2", "status": "awaiting_approval", "checkpoint_id": checkpoint_id},
    ]
    assert snapshot["batch"][0]["result"]["name"] == "Ada Lovelace"  # not in the log until the batch settles


def test_a_v6_snapshot_round_trips_with_the_log_message_it_refers_to():
    host = waiting_host()
    state = host.state()
    assert [(c.name, c.arguments) for c in state.batch] == [
        ("lookup_customer", {"email": ADA}),
        ("send_email", EMAIL),
        ("refund_payment", REFUND),
    ]
    loaded = AgentState.from_snapshot(json.loads(json.dumps(state.to_snapshot())))
    assert [c.id for c in loaded.batch] == ["call_0_0", "call_0_1", "call_0_2"]  # known without the log
    assert loaded.needs_log and loaded.step == Step.TOOLS

    loaded.resolve_batch(host.log[loaded.batch_position])

    assert loaded == state and not loaded.needs_log
    assert loaded.to_snapshot() == state.to_snapshot()


def test_a_state_loaded_without_the_log_is_never_written_back_short_of_its_calls():
    loaded = AgentState.from_snapshot(latest(waiting_host()))
    with pytest.raises(SnapshotError, match="resolve_batch first"):
        loaded.to_snapshot()


def test_a_run_resumed_from_v6_does_exactly_what_it_did_from_the_same_checkpoint_in_v5():
    """The same calls, ids, arguments and ledger keys, whichever schema the checkpoint was in."""
    by_reference = waiting_host()
    whole = waiting_host(by_reference.run_id)  # one run, twice: the idempotency keys must match too
    replace_latest(whole, as_v5(latest(whole), whole))
    for host in (by_reference, whole):
        host.approve("call_0_1")
        host.approve("call_0_2")
        assert step(host) == Finished("Done.")

    assert effects(by_reference) == effects(whole)
    ledger, emails, refunds = effects(by_reference)
    assert [key for key, *_ in ledger] == [f"{by_reference.run_id}:call_0_{n}" for n in (1, 2)]  # reads: none
    assert emails == [(ADA, "Hi", "x", f"{by_reference.run_id}:call_0_1")]
    assert [(order, float(amount)) for order, amount, _ in refunds] == [("A-1001", 150.0)]


def test_a_reviewers_edit_still_runs_when_the_run_resumes_from_a_v6_checkpoint():
    """The edited arguments are the signed decision's; the checkpoint keeps the model's."""
    host = waiting_host()
    edited = {**EMAIL, "subject": "Hello Ada", "body": "Kinder words."}
    host.approve("call_0_1", verdict="edit", arguments=edited)
    host.approve("call_0_2")

    assert step(host) == Finished("Done.")

    assert [(e.subject, e.body) for e in host.world.emails] == [("Hello Ada", "Kinder words.")]
    assert host.ledger.rows[f"{host.run_id}:call_0_1"].result["message_id"] == host.world.emails[0].message_id


def test_arguments_that_differ_from_the_log_are_stored_and_survive_a_resume():
    """A call whose arguments are not the message's keeps its own through the checkpoint."""
    host = waiting_host()
    state = host.state()
    changed = {**REFUND, "amount": 100}
    state.batch[2].arguments = changed

    snapshot = state.to_snapshot()

    assert snapshot["batch"][2]["arguments"] == changed and "name" not in snapshot["batch"][2]
    assert "arguments" not in snapshot["batch"][1]
    loaded = AgentState.from_snapshot(snapshot)
    loaded.resolve_batch(host.log[loaded.batch_position])
    assert loaded.batch[2].arguments == changed
    assert loaded.batch[1].arguments == EMAIL


def test_arguments_that_differ_from_the_log_only_in_type_are_stored():
    host = waiting_host()
    state = host.state()
    state.batch[2].arguments = {**REFUND, "amount": 150.0}  # equal in Python, not as JSON

    loaded = AgentState.from_snapshot(json.loads(json.dumps(state.to_snapshot())))
    loaded.resolve_batch(host.log[loaded.batch_position])

    assert json.dumps(loaded.batch[2].arguments["amount"]) == "150.0"


def test_a_v5_checkpoint_resumes_and_its_next_checkpoint_refers_to_the_log():
    host = waiting_host()
    replace_latest(host, as_v5(latest(host), host))
    host.approve("call_0_1")

    assert step(host) == Waiting(("call_0_2",))

    assert latest(host)["schema_version"] == SCHEMA_VERSION
    assert all("arguments" not in call and "name" not in call for call in latest(host)["batch"])
    assert [e.subject for e in host.world.emails] == ["Hi"]


def tampered_runs_nothing(host: InMemoryHost) -> None:
    """The resume refuses the checkpoint: no tool ran, nothing was written."""
    before = (copy.deepcopy(host.log), len(host.checkpoints.list(host.run_id)), effects(host))
    host.approve("call_0_1")
    host.approve("call_0_2")
    with pytest.raises(SnapshotError):
        step(host)
    assert (host.log, len(host.checkpoints.list(host.run_id)), effects(host)) == before


def test_a_checkpoint_pointing_at_another_message_is_refused():
    host = waiting_host()
    replace_latest(host, {**latest(host), "message_count": 2})  # points at the user's message
    tampered_runs_nothing(host)


def test_a_log_message_with_other_call_ids_is_refused():
    host = waiting_host()
    for call in host.log[2]["tool_calls"]:
        call["id"] = call["id"].replace("call_0", "call_9")
    tampered_runs_nothing(host)


def test_a_log_message_with_another_number_of_calls_is_refused():
    host = waiting_host()
    host.log[2]["tool_calls"].pop()
    tampered_runs_nothing(host)


def test_a_batch_entry_naming_another_tool_than_the_log_is_refused():
    host = waiting_host()
    snapshot = latest(host)
    snapshot["batch"][1]["name"] = "refund_payment"
    replace_latest(host, snapshot)
    tampered_runs_nothing(host)


def test_a_refused_resolve_changes_nothing():
    host = waiting_host()
    loaded = AgentState.from_snapshot(latest(host))
    other = copy.deepcopy(host.log[2])
    other["tool_calls"][2]["id"] = "call_0_9"
    before = copy.deepcopy(loaded.batch)

    with pytest.raises(SnapshotError, match="call_0_9"):
        loaded.resolve_batch(other)

    assert loaded.batch == before and loaded.needs_log


def test_a_call_the_model_sent_broken_arguments_for_keeps_them_missing():
    """An invalid call has no arguments to run with; read back from the log it still has none."""
    state = AgentState(step=Step.TOOLS, message_count=3, model_calls=1)
    state.batch = [
        CallState(
            id="call_0_0",
            name="send_email",
            arguments=None,
            status=CallStatus.INVALID,
            result={"error": "arguments are not valid JSON"},
        )
    ]
    state.batch_message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_0_0", "type": "function", "function": {"name": "send_email", "arguments": "{"}}
        ],
    }
    snapshot = state.to_snapshot()
    assert snapshot["batch"] == [
        {"id": "call_0_0", "status": "invalid", "result": {"error": "arguments are not valid JSON"}}
    ]
    loaded = AgentState.from_snapshot(snapshot)
    loaded.resolve_batch(state.batch_message)
    assert loaded == state


def test_a_batch_is_written_whole_unless_its_message_holds_exactly_its_calls():
    """A message with more calls, or none of the batch's ids, says nothing for the batch."""
    host = waiting_host()
    state = host.state()
    message = copy.deepcopy(state.batch_message)
    state.batch = state.batch[:2]  # the message holds one call more
    assert all({"name", "arguments"} <= set(call) for call in state.to_snapshot()["batch"])
    state.batch_message = {**message, "tool_calls": message["tool_calls"][:2]}
    assert all("arguments" not in call for call in state.to_snapshot()["batch"])


def test_a_call_keeps_its_name_and_arguments_against_another_calls_log_entry():
    call = AgentState.from_snapshot(latest(waiting_host())).batch[1]
    call.name, call.arguments = "send_email", EMAIL
    other = LoggedCall(id="call_0_2", name="send_email", arguments=EMAIL)
    assert call.to_dict(other) == call.to_dict() and {"name", "arguments"} <= set(call.to_dict(other))
    assert "arguments" not in call.to_dict(LoggedCall(id="call_0_1", name="send_email", arguments=EMAIL))


def test_a_snapshot_that_brings_its_own_batch_message_is_refused():
    """The message a batch is checked against comes from the log, never from the snapshot."""
    host = waiting_host()
    snapshot = {**latest(host), "batch_message": host.log[2]}
    with pytest.raises(SnapshotError, match="never holds"):
        AgentState.from_snapshot(snapshot)
