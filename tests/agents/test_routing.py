"""Routing rules over the arguments: who the tool or the agent names, with no Django."""

from __future__ import annotations

import pytest

from agents.registry import get_agent
from agents.routing import Condition, Quorum, Route, routed_to

FINANCE = Route(to=("group:finance",), when=(Condition("amount", ">", 1000),))


def test_the_first_route_that_applies_names_the_deciders():
    routes = (FINANCE, Route(to=("alice",)))
    assert routed_to(routes, {"amount": 1500}) == ("group:finance",)
    assert routed_to(routes, {"amount": 1000}) == ("alice",)


def test_no_route_applying_names_nobody():
    assert routed_to((FINANCE,), {"amount": 20}) is None


@pytest.mark.parametrize(
    "arguments",
    [{}, {"amount": "5000"}, {"amount": True}, {"amount": None}, {"other": 5000}],
    ids=["missing", "a string", "a bool", "null", "another field"],
)
def test_a_condition_over_a_missing_or_mistyped_field_never_holds(arguments):
    assert routed_to((FINANCE,), arguments) is None


def test_conditions_all_hold_or_the_route_does_not_apply():
    route = Route(to=("bob",), when=(Condition("to", "endswith", "@example.com"), Condition("n", "<=", 3)))
    assert route.applies({"to": "a@example.com", "n": 3})
    assert not route.applies({"to": "a@example.com", "n": 4})
    assert not route.applies({"to": "a@example.org", "n": 1})


@pytest.mark.parametrize("to", [(), "alice", ("",), ("group:",), (" bob",), ("a b",)])
def test_a_route_must_name_real_targets(to):
    with pytest.raises(ValueError):
        Route(to=to)


def test_an_unknown_operator_is_refused_when_declared():
    with pytest.raises(ValueError, match="unknown operator"):
        Condition("amount", "=~", 1)


@pytest.mark.parametrize("approvals", [0, -1, 1.5, "2"])
def test_a_quorum_needs_a_whole_number_of_approvals_from_one(approvals):
    with pytest.raises(ValueError):
        Quorum(approvals=approvals)


def test_the_demo_routes_large_refunds_to_finance_and_execute_needs_two():
    demo = get_agent("demo")
    refund = demo.tool("refund_payment")
    assert demo.deciders(refund, {"order_id": "A-1", "amount": 1000.5}) == ("group:finance",)
    assert demo.deciders(refund, {"order_id": "A-1", "amount": 1000}) is None
    assert demo.tool("execute").quorum == Quorum(approvals=2)
    assert demo.tool("send_email").quorum == Quorum(approvals=1)


def test_the_tool_route_wins_over_the_agents():
    demo = get_agent("demo")
    from dataclasses import replace

    agent = replace(demo, routing=(Route(to=("alice",)),))
    refund = demo.tool("refund_payment")
    assert agent.deciders(refund, {"order_id": "A-1", "amount": 5000}) == ("group:finance",)
    assert agent.deciders(refund, {"order_id": "A-1", "amount": 5}) == ("alice",)
