"""Snapshots saved by earlier versions still load; newer ones and gaps are errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents.loop import Finished, Waiting, advance
from agents.providers.scripted import ScriptedProvider
from agents.registry import get_agent
from agents.state import (
    MIGRATORS,
    SCHEMA_VERSION,
    AgentState,
    CallState,
    CallStatus,
    SnapshotError,
    Step,
    migrate,
)
from agents.testing.host import InMemoryHost
from agents.testing.keys import sign_decision

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "checkpoints"
V1 = sorted(FIXTURES.glob("v1_*.json"))
SCRIPT = [
    {
        "tool_calls": [
            {"name": "lookup_customer", "arguments": {"email": "ada@example.com"}},
            {"name": "send_email", "arguments": {"to": "ada@example.com", "subject": "Hi", "body": "x"}},
            {"name": "refund_payment", "arguments": {"order_id": "A-1001", "amount": 150}},
        ]
    },
    {"content": "Done."},
]


def load(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def assistant_message_of(calls: list[dict]) -> dict:
    """The assistant message the loop logs for these calls (AssistantTurn.as_message)."""
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call["id"],
                "type": "function",
                "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])},
            }
            for call in calls
        ],
    }


def test_there_are_fixtures_for_every_older_version():
    versions = {int(path.name.split("_")[0][1:]) for path in FIXTURES.glob("v*_*.json")}
    assert versions == set(range(1, SCHEMA_VERSION))


@pytest.mark.parametrize("path", V1, ids=lambda p: p.stem)
def test_every_v1_snapshot_loads_and_upgrades(path):
    raw = json.loads(path.read_text())
    assert raw["schema_version"] == 1
    state = AgentState.from_snapshot(raw)
    assert state.invalid_calls == 0 and state.waiting_since is None
    again = state.to_snapshot()
    assert again["schema_version"] == SCHEMA_VERSION
    assert AgentState.from_snapshot(again) == state


def test_the_v1_fixture_keeps_its_per_call_state():
    state = AgentState.from_snapshot(load("v1_batch_one_approved_one_waiting.json"))
    assert state.step == Step.TOOLS
    assert [c.status for c in state.batch] == [CallStatus.DONE, CallStatus.DONE, CallStatus.AWAITING]
    assert state.batch[1].result["sent"] is True


def test_a_run_checkpointed_by_v1_resumes_and_finishes_on_this_code():
    old = load("v1_batch_one_approved_one_waiting.json")
    host = InMemoryHost(run_id="11111111-1111-1111-1111-111111111111")
    agent, provider = get_agent("demo"), ScriptedProvider(SCRIPT)
    assert isinstance(advance(agent=agent, provider=provider, host=host), Waiting)  # rebuilds the message log
    host.checkpoints.put(host.run_id, old)  # ...then the old code's checkpoint is the latest
    waiting = next(c for c in old["batch"] if c["status"] == "awaiting_approval")
    host.decisions[waiting["id"]] = sign_decision(
        host.signing_key,
        key_id=host.key_id,
        run_id=host.run_id,
        checkpoint_id=waiting["checkpoint_id"],
        tool_call_id=waiting["id"],
        tool=waiting["name"],
        arguments=waiting["arguments"],
    )
    assert advance(agent=agent, provider=provider, host=host) == Finished("Done.")
    assert [r.order_id for r in host.world.refunds] == ["A-1001"]
    assert host.world.emails == []  # sent under the old code; its recorded result is reused, never resent


def test_a_snapshot_newer_than_the_code_is_an_error():
    with pytest.raises(SnapshotError, match="newer"):
        migrate({**load("v1_done.json"), "schema_version": SCHEMA_VERSION + 1})


def test_a_gap_in_the_migrators_is_an_error(monkeypatch):
    monkeypatch.delitem(MIGRATORS, 1)
    with pytest.raises(SnapshotError, match="no migrator"):
        migrate(load("v1_done.json"))


def test_a_snapshot_without_a_version_is_an_error():
    raw = load("v1_done.json")
    del raw["schema_version"]
    with pytest.raises(SnapshotError):
        migrate(raw)


def test_a_v3_snapshot_loads_with_no_call_allowed_by_a_grant():
    raw = load("v3_batch_one_unknown_one_waiting.json")
    assert raw["schema_version"] == 3
    state = AgentState.from_snapshot(raw)
    assert [c.status for c in state.batch] == [CallStatus.DONE, CallStatus.UNKNOWN, CallStatus.AWAITING]
    assert [c.grant_id for c in state.batch] == [None, None, None]
    assert state.to_snapshot()["schema_version"] == SCHEMA_VERSION


def test_a_v4_snapshot_loads_and_keeps_every_field():
    raw = load("v4_batch_one_unknown_one_waiting.json")
    assert raw["schema_version"] == 4 and "result" in raw["batch"][2]
    state = AgentState.from_snapshot(raw)
    assert [c.status for c in state.batch] == [CallStatus.DONE, CallStatus.UNKNOWN, CallStatus.AWAITING]
    assert state.batch[0].result["name"] == "Ada Lovelace"
    assert AgentState.from_snapshot(state.to_snapshot()) == state


def test_a_v5_snapshot_loads_resumes_and_is_written_back_by_reference():
    """v5 kept each call whole: it loads as it was, checked against the log, and the next
    checkpoint of the same batch refers to the log's message instead."""
    raw = load("v5_batch_one_unknown_one_waiting.json")
    assert raw["schema_version"] == 5 and "grant_id" not in raw["batch"][0]
    state = AgentState.from_snapshot(raw)
    assert [c.status for c in state.batch] == [CallStatus.DONE, CallStatus.UNKNOWN, CallStatus.AWAITING]
    assert [c.arguments for c in state.batch] == [c["arguments"] for c in raw["batch"]]
    assert state.to_snapshot()["batch"][2]["name"] == "refund_payment"  # no log read yet: whole
    state.resolve_batch(assistant_message_of(raw["batch"]))
    assert [c.arguments for c in state.batch] == [c["arguments"] for c in raw["batch"]]
    assert [set(entry) for entry in state.to_snapshot()["batch"]] == [
        {"id", "status", "result"},
        {"id", "status", "checkpoint_id"},
        {"id", "status", "checkpoint_id"},
    ]


def test_a_v5_batch_whose_step_was_left_out_keeps_it_at_model():
    """v5 left out a step at its default (model); v6 reads a left-out step from the batch."""
    raw = {"message_count": 3, "batch": load("v5_batch_one_unknown_one_waiting.json")["batch"]}
    assert AgentState.from_snapshot({**raw, "schema_version": 5}).step == Step.MODEL
    assert AgentState.from_snapshot({**raw, "schema_version": 6}).step == Step.TOOLS


def test_a_v6_snapshot_leaves_out_what_is_at_its_default_or_in_the_log():
    """The storage target (`make bench` #5): a checkpoint between model turns is a count and a version;
    one with an open batch holds each call's id and status, not what its message says."""
    assert AgentState(message_count=0).to_snapshot() == {"message_count": 0, "schema_version": SCHEMA_VERSION}
    state = AgentState(step=Step.TOOLS, message_count=5, model_calls=2)
    state.batch = [
        CallState(id="call_1", name="send_email", arguments={"to": "a@b"}, status=CallStatus.READY)
    ]
    assert state.to_snapshot() == {
        "message_count": 5,
        "model_calls": 2,
        "batch": [{"id": "call_1", "name": "send_email", "arguments": {"to": "a@b"}, "status": "ready"}],
        "schema_version": SCHEMA_VERSION,
    }
    state.batch_message = assistant_message_of(
        [{"id": "call_1", "name": "send_email", "arguments": {"to": "a@b"}}]
    )
    assert state.to_snapshot() == {
        "message_count": 5,
        "model_calls": 2,
        "batch": [{"id": "call_1", "status": "ready"}],
        "schema_version": SCHEMA_VERSION,
    }


def test_every_field_away_from_its_default_survives_a_round_trip():
    call = CallState(
        id="call_2",
        name="refund_payment",
        arguments=None,
        status=CallStatus.DONE,
        result={"refunded": "0.00"},
        checkpoint_id="c-1",
        grant_id="g-1",
    )
    state = AgentState(
        step=Step.DONE,
        message_count=9,
        batch=[call],
        model_calls=4,
        output="Done.",
        invalid_calls=1,
        waiting_since="2026-12-01T00:00:00+00:00",
    )
    assert AgentState.from_snapshot(json.loads(json.dumps(state.to_snapshot()))) == state
