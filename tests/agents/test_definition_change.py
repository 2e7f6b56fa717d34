"""A run resumed under another definition of its agent (agents/definition.py), against the
in-memory host: the pending call is checked again; where it holds the run goes on and records
the new definition, where it does not the call goes back to a human with the reason, and a
tool that is gone fails the call with an error the model reads."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from agents.decisions import SignedDecision, Verdict
from agents.definition import Recorded, changes, describe, digests, fingerprint, tool_changes
from agents.loop import Finished, Waiting, advance
from agents.providers.scripted import ScriptedProvider
from agents.registry import Agent
from agents.routing import GROUP_PREFIX, Quorum, Route
from agents.state import CallState, CallStatus
from agents.testing.host import InMemoryHost
from agents.tools import ALWAYS, NEVER, Effect, Tool, ToolContext

REFUNDS: list[dict[str, Any]] = []


def _refund(arguments: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    REFUNDS.append(dict(arguments))
    return {"refunded": arguments["amount"]}


def _lookup(arguments: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    return {"order": arguments["order"], "total": 500}


REFUND = Tool(
    name="refund_payment",
    description="Refund part of an order.",
    parameters={
        "type": "object",
        "properties": {"order": {"type": "string"}, "amount": {"type": "integer", "minimum": 1}},
        "required": ["order", "amount"],
        "additionalProperties": False,
    },
    effect=Effect.EXTERNAL,
    approval=ALWAYS,
    func=_refund,
)
LOOKUP = Tool(
    name="lookup_order",
    description="Look an order up.",
    parameters={"type": "object", "properties": {"order": {"type": "string"}}, "required": ["order"]},
    effect=Effect.READ,
    approval=NEVER,
    func=_lookup,
)
STARTED = Agent(name="refunds", system_prompt="Refund orders.", tools=(LOOKUP, REFUND))

SCRIPT = [
    {"tool_calls": [{"name": "refund_payment", "arguments": {"order": "A-1", "amount": 500}}]},
    {"content": "Done."},
]


def with_refund(agent: Agent = STARTED, **changed: Any) -> Agent:
    """`agent` with its refund tool changed as given (a schema, a quorum, routes...)."""
    tools = tuple(replace(t, **changed) if t.name == "refund_payment" else t for t in agent.tools)
    return replace(agent, tools=tools)


NARROWED = with_refund(
    parameters={
        "type": "object",
        "properties": {"order": {"type": "string"}, "amount": {"type": "integer", "maximum": 100}},
        "required": ["order", "amount"],
        "additionalProperties": False,
    }
)


class DefinitionRecordingHost(InMemoryHost):
    """The in-memory host, recording the run's definition as the desk does (DefinitionHost):
    what it adopted, the calls sent back to a human with their reasons, the calls whose tool
    was gone. `groups` resolves a route's "group:NAME" for the routing check."""

    def __init__(self, agent: Agent, groups: dict[str, set[str]] | None = None, **options: Any) -> None:
        super().__init__(agent=agent.name, **options)
        self.recorded = Recorded(fingerprint(agent), digests(agent))
        self.current = agent  # the definition the routing check reads, as the desk's registry
        self.groups = groups or {}
        self.adopted: list[list[str]] = []
        self.sent_back: dict[str, str] = {}
        self.gone: dict[str, str] = {}

    def recorded_definition(self) -> Recorded:
        return self.recorded

    def definition_adopted(self, *, sha256: str, digests: dict[str, Any], changes: list[str]) -> None:
        self.recorded = Recorded(sha256, digests)
        self.adopted.append(changes)

    def call_sent_back(self, call: CallState, reason: str) -> None:
        self.sent_back[call.id] = reason

    def call_gone(self, call: CallState, reason: str) -> None:
        self.gone[call.id] = reason

    def routed_elsewhere(self, call: CallState, decision: SignedDecision) -> str | None:
        tool = self.current.tool(call.name)
        named = self.current.deciders(tool, call.arguments or {}) if tool is not None else None
        if named is None:
            return None
        people = {p for target in named for p in self._people(target)}
        for vote in (decision, *decision.co_decisions):
            reviewer = str(vote.payload.get("reviewer"))
            if reviewer not in people:
                return f"{call.name} is now routed to {', '.join(named)}; {reviewer} is not among them"
        return None

    def _people(self, target: str) -> set[str]:
        if target.startswith(GROUP_PREFIX):
            return self.groups.get(target.removeprefix(GROUP_PREFIX), set())
        return {target}


def resume(host: DefinitionRecordingHost, agent: Agent, script: list[dict[str, Any]] = SCRIPT) -> Any:
    host.current = agent
    return advance(agent=agent, provider=ScriptedProvider(script), host=host)


def waiting_refund(**options: Any) -> DefinitionRecordingHost:
    """A run of STARTED waiting on its refund of 500, which a human then approves (or edits)."""
    REFUNDS.clear()
    host = DefinitionRecordingHost(STARTED, **options)
    assert isinstance(resume(host, STARTED), Waiting)
    return host


def results(host: InMemoryHost) -> dict[str, Any]:
    return {m["tool_call_id"]: json.loads(m["content"]) for m in host.log if m["role"] == "tool"}


# --- the fingerprint and its words --------------------------------------------------------------
def test_the_fingerprint_is_stable_and_changes_with_a_schema_a_quorum_or_a_description():
    assert fingerprint(STARTED) == fingerprint(replace(STARTED, tools=(LOOKUP, REFUND)))
    assert len(fingerprint(STARTED)) == 64
    others = {
        fingerprint(NARROWED),
        fingerprint(with_refund(quorum=Quorum(approvals=2))),
        fingerprint(with_refund(approval=NEVER)),
        fingerprint(with_refund(effect=Effect.IDEMPOTENT_EXTERNAL)),
        fingerprint(with_refund(routing=(Route(to=("group:finance",)),))),
        fingerprint(replace(STARTED, tools=(replace(LOOKUP, description="Find an order."), REFUND))),
        fingerprint(replace(STARTED, tools=(LOOKUP,))),
        fingerprint(replace(STARTED, requires_device_keys=True)),
    }
    assert fingerprint(STARTED) not in others
    assert len(others) == 8
    assert describe(STARTED)["tools"]["refund_payment"]["approval"] == "agents.tools.ALWAYS"


def test_a_change_is_said_in_words_for_each_tool():
    before = digests(STARTED)
    assert tool_changes(before, digests(NARROWED), "refund_payment") == [
        "the schema of refund_payment changed"
    ]
    assert tool_changes(before, digests(replace(STARTED, tools=(LOOKUP,))), "refund_payment") == [
        "refund_payment no longer exists"
    ]
    assert tool_changes(before, digests(with_refund(quorum=Quorum(approvals=2))), "refund_payment") == [
        "the quorum of refund_payment changed"
    ]
    assert tool_changes(before, before, "refund_payment") == []
    assert changes(before, digests(replace(STARTED, routing=(Route(to=("bob",)),)))) == [
        "the agent's routing changed"
    ]
    assert changes(None, before) == ["this run started before definitions were recorded"]


# --- the case: a schema narrowed while the call waited ---------------------------------
def test_a_schema_narrowed_while_the_call_waited_sends_it_back_to_a_human_with_the_reason():
    host = waiting_refund()
    first = host.approve("call_0_0")

    outcome = resume(host, NARROWED)

    assert outcome == Waiting(("call_0_0",))
    assert REFUNDS == []  # nothing ran
    assert host.sent_back["call_0_0"] == (
        "The agent's definition changed since this call was decided: the arguments no longer fit "
        "the schema of refund_payment: amount: 500 is greater than the maximum of 100."
    )
    again = host.approval("call_0_0")
    assert again.checkpoint_id != first.payload["checkpoint_id"]  # a new request, for a new decision
    assert host.adopted == []  # the call is still open: the run has not gone on yet
    # A human edits it to fit: it runs, and the run goes on under the new definition.
    host.approve("call_0_0", verdict=Verdict.EDIT, arguments={"order": "A-1", "amount": 100})
    assert resume(host, NARROWED) == Finished("Done.")
    assert REFUNDS == [{"order": "A-1", "amount": 100}]
    assert host.adopted == [["the schema of refund_payment changed"]]
    assert host.recorded.sha256 == fingerprint(NARROWED)


def test_an_edit_that_fits_the_narrowed_schema_still_holds():
    """The arguments checked are those the decision runs: an edit's own."""
    host = waiting_refund()
    host.approve("call_0_0", verdict=Verdict.EDIT, arguments={"order": "A-1", "amount": 80})
    assert resume(host, NARROWED) == Finished("Done.")
    assert REFUNDS == [{"order": "A-1", "amount": 80}]
    assert host.sent_back == {}


def test_a_change_that_does_not_touch_the_call_lets_the_run_go_on_and_says_what_changed():
    host = waiting_refund()
    host.approve("call_0_0")
    described = replace(STARTED, tools=(replace(LOOKUP, description="Find an order by id."), REFUND))

    assert resume(host, described) == Finished("Done.")

    assert REFUNDS == [{"order": "A-1", "amount": 500}]
    assert host.sent_back == {}
    assert host.adopted == [["the description of lookup_order changed"]]
    # Recorded now: a later resume under the same definition checks and says nothing again.
    assert host.recorded == Recorded(fingerprint(described), digests(described))


def test_a_tool_that_no_longer_exists_fails_the_call_with_an_error_the_model_reads():
    host = waiting_refund()
    host.approve("call_0_0")
    without = replace(STARTED, tools=(LOOKUP,))

    assert resume(host, without) == Finished("Done.")

    error = "refund_payment no longer exists in this agent's definition"
    assert results(host) == {"call_0_0": {"error": error}}
    assert host.gone == {"call_0_0": error}
    assert REFUNDS == []
    assert host.adopted == [["refund_payment no longer exists"]]


def test_a_quorum_raised_while_one_approval_waited_asks_for_humans_again():
    host = waiting_refund()
    host.approve("call_0_0", reviewer="alice")
    two = with_refund(quorum=Quorum(approvals=2))

    assert resume(host, two) == Waiting(("call_0_0",))

    assert REFUNDS == []
    assert (
        "refund_payment now needs approvals from 2 different reviewers; this call has 1"
        in (host.sent_back["call_0_0"])
    )
    # Two reviewers approve the new request: it runs.
    first = host.sign("call_0_0", reviewer="alice")
    host.decisions["call_0_0"] = replace(host.sign("call_0_0", reviewer="bob"), co_decisions=(first,))
    assert resume(host, two) == Finished("Done.")
    assert REFUNDS == [{"order": "A-1", "amount": 500}]


def test_routing_that_now_names_a_group_the_decider_is_not_in_sends_the_call_back():
    host = waiting_refund(groups={"finance": {"carol"}}, allowed_reviewers=("alice", "carol"))
    host.approve("call_0_0", reviewer="alice")
    finance = with_refund(routing=(Route(to=("group:finance",)),))

    assert resume(host, finance) == Waiting(("call_0_0",))

    assert REFUNDS == []
    assert (
        "refund_payment is now routed to group:finance; alice is not among them" in host.sent_back["call_0_0"]
    )
    host.approve("call_0_0", reviewer="carol")
    assert resume(host, finance) == Finished("Done.")
    assert REFUNDS == [{"order": "A-1", "amount": 500}]


def test_device_keys_now_required_send_a_server_signed_decision_back():
    host = waiting_refund()
    host.approve("call_0_0")
    devices = with_refund(requires_device_keys=True)
    host.gate.device_required = lambda tool: devices.requires_device_decision(tool)

    assert resume(host, devices) == Waiting(("call_0_0",))

    assert (
        "refund_payment now requires a decision signed by the reviewer's device key"
        in (host.sent_back["call_0_0"])
    )
    assert REFUNDS == []


def test_a_run_that_recorded_no_definition_checks_its_call_and_then_records_one():
    """A run from before definitions were recorded: unknown, so the call is checked (here it
    holds) and the run records the definition it goes on under."""
    host = waiting_refund()
    host.approve("call_0_0")
    host.recorded = Recorded("", None)

    assert resume(host, NARROWED) == Waiting(("call_0_0",))  # checked: 500 no longer fits
    assert "amount: 500 is greater than the maximum of 100" in host.sent_back["call_0_0"]

    host2 = waiting_refund()
    host2.approve("call_0_0")
    host2.recorded = Recorded("", None)
    assert resume(host2, STARTED) == Finished("Done.")
    assert host2.adopted == [["this run started before definitions were recorded"]]


def test_an_unchanged_definition_checks_nothing_and_records_nothing():
    host = waiting_refund()
    host.approve("call_0_0")
    assert resume(host, STARTED) == Finished("Done.")
    assert host.adopted == [] and host.sent_back == {}


def test_a_ready_call_whose_arguments_no_longer_fit_goes_to_a_human():
    """A call that needed no human when the run stopped (a crash before it ran), under a schema
    it no longer fits, is not run as the model wrote it: a human is asked."""
    REFUNDS.clear()
    lenient = with_refund(approval=NEVER)
    host = DefinitionRecordingHost(lenient)
    state_script = [
        {"tool_calls": [{"name": "refund_payment", "arguments": {"order": "A-1", "amount": 500}}]}
    ]
    # Stop the loop after it committed the batch (the call ready), as a crash would.
    host.tool_context = _crash  # type: ignore[method-assign]
    with pytest.raises(_Crash):
        resume(host, lenient, state_script)
    del host.tool_context
    strict = replace(
        NARROWED,
        tools=tuple(replace(t, approval=NEVER) if t.name == "refund_payment" else t for t in NARROWED.tools),
    )
    assert resume(host, strict, state_script) == Waiting(("call_0_0",))
    assert host.state().batch[0].status == CallStatus.AWAITING
    assert "amount: 500 is greater than the maximum of 100" in host.sent_back["call_0_0"]
    assert REFUNDS == []


class _Crash(Exception):
    pass


def _crash(call: CallState) -> ToolContext:
    raise _Crash()


def test_the_run_records_the_new_definition_once_no_call_of_its_batch_is_open():
    """Two calls wait; one is approved and holds under the new definition and runs; the run
    records the new definition only when the other, raised under the old one, is settled too
    (and checked: its decision could be one the new definition no longer accepts)."""
    REFUNDS.clear()
    two = [
        {
            "tool_calls": [
                {"name": "refund_payment", "arguments": {"order": "A-1", "amount": 50}},
                {"name": "refund_payment", "arguments": {"order": "A-2", "amount": 500}},
            ]
        },
        {"content": "Done."},
    ]
    host = DefinitionRecordingHost(STARTED)
    assert resume(host, STARTED, two) == Waiting(("call_0_0", "call_0_1"))
    host.approve("call_0_0")

    assert resume(host, NARROWED, two) == Waiting(("call_0_1",))
    assert REFUNDS == [{"order": "A-1", "amount": 50}]
    assert host.adopted == []  # call_0_1 is still open under a request of the old definition

    host.approve("call_0_1")
    assert resume(host, NARROWED, two) == Waiting(("call_0_1",))  # checked when decided: 500 no longer fits
    assert "amount: 500 is greater than the maximum of 100" in host.sent_back["call_0_1"]
    host.reject("call_0_1", "Too much.")
    assert resume(host, NARROWED, two) == Finished("Done.")
    assert host.adopted == [["the schema of refund_payment changed"]]
    assert REFUNDS == [{"order": "A-1", "amount": 50}]


def _refund_cut_short(arguments: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    raise ConnectionResetError("the connection dropped after the request was sent")


def test_a_reconciled_call_whose_tool_is_gone_settles_from_the_result_a_reviewer_confirmed():
    """The effect's outcome was unknown, a reviewer confirmed it happened; the tool is removed
    before the run resumes: the model reads the confirmed result, nothing crashes."""
    flaky = with_refund(func=_refund_cut_short)
    host = DefinitionRecordingHost(flaky)
    assert resume(host, flaky) == Waiting(("call_0_0",))
    host.approve("call_0_0")
    assert resume(host, flaky) == Waiting(("call_0_0",))  # unknown: a reconciliation waits
    assert host.state().batch[0].status == CallStatus.UNKNOWN
    host.confirm_effect("call_0_0", result={"refunded": 500, "ref": "R-9"})

    assert resume(host, replace(STARTED, tools=(LOOKUP,))) == Finished("Done.")

    assert results(host) == {"call_0_0": {"refunded": 500, "ref": "R-9"}}
    assert host.adopted == [["refund_payment no longer exists"]]
