"""Approval policies see the run's earlier calls and the world: a limit cannot be split across
calls, nor across runs. In-process: the loop, the gate and the recording world, no database."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import pytest

from agents.calls import call_history
from agents.demo import refund_needs_approval
from agents.loop import Finished, Waiting, advance
from agents.providers.scripted import ScriptedProvider
from agents.registry import get_agent
from agents.state import CallStatus
from agents.testing.host import InMemoryHost
from agents.testing.world import RecordingWorld
from agents.tools import NEVER, Effect, PastCall, Tool

DEMO = get_agent("demo")


def refund(amount: int, order_id: str = "A-1001") -> dict[str, Any]:
    return {"name": "refund_payment", "arguments": {"order_id": order_id, "amount": amount}}


def statuses(host: InMemoryHost) -> dict[str, CallStatus]:
    state = host.state()
    assert state is not None
    return {call.id: call.status for call in state.batch}


def test_three_refunds_of_100_100_and_50_on_one_order_in_three_turns_need_approval_from_the_second():
    script = [
        {"tool_calls": [refund(100)]},
        {"tool_calls": [refund(100)]},
        {"tool_calls": [refund(50)]},
        {"content": "Refunded."},
    ]
    host = InMemoryHost()

    # The first (total 100) runs at once; the second (total 200) waits for a reviewer.
    assert advance(agent=DEMO, provider=ScriptedProvider(script), host=host) == Waiting(("call_1_0",))
    assert [str(r.amount) for r in host.world.refunds] == ["100"]

    host.approve("call_1_0")
    # The third (total 250) waits too: the approved 100 counts.
    assert advance(agent=DEMO, provider=ScriptedProvider(script), host=host) == Waiting(("call_2_0",))
    assert [str(r.amount) for r in host.world.refunds] == ["100", "100"]
    assert [call.id for call in host.approvals] == ["call_1_0", "call_2_0"]


def test_three_refunds_in_one_turn_count_the_batchs_earlier_calls_that_have_not_run_yet():
    script = [{"tool_calls": [refund(100), refund(100), refund(50)]}, {"content": "Refunded."}]
    host = InMemoryHost()

    assert advance(agent=DEMO, provider=ScriptedProvider(script), host=host) == Waiting(
        ("call_0_1", "call_0_2")
    )
    assert statuses(host)["call_0_0"] == CallStatus.DONE
    assert [str(r.amount) for r in host.world.refunds] == ["100"]


def test_refunds_on_another_order_and_rejected_refunds_do_not_count():
    script = [
        {"tool_calls": [refund(30, "A-1002"), refund(500, "A-1001")]},
        {"tool_calls": [refund(90, "A-1001")]},
        {"content": "Refunded."},
    ]
    host = InMemoryHost()

    assert advance(agent=DEMO, provider=ScriptedProvider(script), host=host) == Waiting(("call_0_1",))
    host.reject("call_0_1", "too much")
    advance(agent=DEMO, provider=ScriptedProvider(script), host=host)
    assert [(r.order_id, str(r.amount)) for r in host.world.refunds] == [("A-1002", "30"), ("A-1001", "90")]
    assert [call.id for call in host.approvals] == ["call_0_1"]


def test_an_edited_refund_counts_with_the_amount_that_ran():
    history = [
        PastCall.of(
            "refund_payment", {"order_id": "A-1001", "amount": 90}, {"order_id": "A-1001", "amount": "20"}
        )
    ]

    assert refund_needs_approval({"order_id": "A-1001", "amount": 80}, history) is False
    assert refund_needs_approval({"order_id": "A-1001", "amount": 81}, history) is True


def test_the_history_is_built_from_the_messages_with_each_calls_result():
    messages = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "refund_payment", "arguments": '{"amount": 5}'},
                },
                {"id": "c2", "type": "function", "function": {"name": "execute", "arguments": "not json"}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"amount": "5"}'},
        {"role": "tool", "tool_call_id": "c2", "content": '{"error": "invalid"}'},
    ]

    history = call_history(messages)

    assert [(p.name, dict(p.arguments), p.outcome) for p in history] == [
        ("refund_payment", {"amount": 5}, {"amount": "5"}),
        ("execute", {}, {"error": "invalid"}),
    ]
    with pytest.raises(TypeError):
        history[0].arguments["amount"] = 1  # type: ignore[index]


def test_a_one_argument_policy_still_works_and_a_two_argument_one_gets_the_history():
    seen: list[tuple[PastCall, ...]] = []

    def with_history(arguments: Mapping[str, Any], history: tuple[PastCall, ...]) -> bool:
        seen.append(history)
        return len(history) > 0

    def tool(policy: Any) -> Tool:
        return Tool(
            name="t",
            description="",
            parameters={"type": "object"},
            effect=Effect.READ,
            func=lambda a, c: 1,
            approval=policy,
        )

    past = [PastCall.of("t", {})]
    assert tool(NEVER).needs_approval({}, past) is False
    assert tool(lambda arguments: True).needs_approval({}, past) is True
    assert tool(with_history).needs_approval({}, past) is True
    assert tool(with_history).needs_approval({}) is False
    assert seen == [tuple(past), ()]


def test_three_runs_refunding_100_100_and_50_on_one_order_need_approval_from_the_second_run():
    """The attack of issue 34: each run alone stays within the limit; the order does not."""
    world = RecordingWorld()
    outcomes = []
    for amount in (100, 100, 50):
        host = InMemoryHost(world=world)
        script = [{"tool_calls": [refund(amount)]}, {"content": "Refunded."}]
        outcomes.append(advance(agent=DEMO, provider=ScriptedProvider(script), host=host))

    assert outcomes[0] == Finished("Refunded.")
    assert outcomes[1:] == [Waiting(("call_0_0",)), Waiting(("call_0_0",))]
    assert [str(r.amount) for r in world.refunds] == ["100"]
    assert "A-1001" in world.holds


def test_with_the_world_the_policy_counts_every_runs_refunds_and_the_batchs_calls_not_run_yet():
    world = RecordingWorld()
    world.refund(order_id="A-1001", amount=Decimal(70), idempotency_key="another-run")
    ran = PastCall.of("refund_payment", {"order_id": "A-1001", "amount": 70}, {"amount": "70"})
    not_yet_run = PastCall.of("refund_payment", {"order_id": "A-1001", "amount": 20})

    # The 70 this run refunded is the world's 70: counted once, not twice.
    assert refund_needs_approval({"order_id": "A-1001", "amount": 30}, [ran], world=world) is False
    assert refund_needs_approval({"order_id": "A-1001", "amount": 31}, [ran], world=world) is True
    assert refund_needs_approval({"order_id": "A-1001", "amount": 11}, [not_yet_run], world=world) is True
    assert refund_needs_approval({"order_id": "A-1002", "amount": 40}, [], world=world) is False


def test_a_history_policy_counts_the_calls_of_a_branch_a_retry_set_aside():
    """A policy that reads only the history (no world) still sees what a set-aside branch did:
    going back to an earlier checkpoint does not undo a refund, so its 90 counts with the new 90."""
    from dataclasses import replace

    from agents.registry import Agent

    def over_100_in_this_run(arguments, history):
        done = sum(p.arguments.get("amount", 0) for p in history if p.name == "refund_payment")
        return done + arguments["amount"] > 100

    tool = replace(DEMO.tool("refund_payment"), approval=over_100_in_this_run)
    agent = Agent(name="history-only", system_prompt="", tools=(tool,))
    set_aside = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_0_0",
                    "type": "function",
                    "function": {
                        "name": "refund_payment",
                        "arguments": '{"order_id": "A-1001", "amount": 90}',
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_0_0", "content": '{"amount": "90"}'},
    ]

    class Retried(InMemoryHost):
        def set_aside_messages(self):
            return set_aside

    host = Retried()
    script = [{"tool_calls": [refund(90)]}, {"content": "Refunded."}]

    assert advance(agent=agent, provider=ScriptedProvider(script), host=host) == Waiting(("call_0_0",))
    assert host.world.refunds == []
