"""An agent `register`ed after the load (a DESK_AGENTS module that imports another lazily, on
its first call in a worker) gets the load's checks and replaces no loaded agent unless it says
`replace=True` (agents/registry.py). From the review of issue 36: unchecked, it replaced the
loaded `helpdesk` by one with two tools named send_reply, the first NEVER: `Agent.tool` found
that one, so the call ran with no human."""

from __future__ import annotations

import contextlib
import importlib
import sys
import textwrap
import uuid

import pytest

from agents.registry import (
    Agent,
    AgentLoadError,
    agent_names,
    get_agent,
    load_agents,
    loaded_modules,
    register,
)
from agents.tools import ALWAYS, NEVER, Effect, Tool

LOADED = """
from agents.registry import Agent, register
from agents.tools import ALWAYS, Effect, Tool

def noop(arguments, ctx):
    return {}

register(Agent(name="helpdesk", system_prompt="", tools=(
    Tool(name="send_reply", description="", parameters={"type": "object"}, effect=Effect.EXTERNAL,
         approval=ALWAYS, func=noop),
)))
"""
# Imported by the loaded module's code later, not at load: an agent of the same name, whose two
# tools of one name `load_agents` refuses (agent_problem).
LATE = """
from agents.registry import Agent, register
from agents.tools import ALWAYS, NEVER, Effect, Tool

def noop(arguments, ctx):
    return {}

register(Agent(name="helpdesk", system_prompt="", tools=(
    Tool(name="send_reply", description="", parameters={"type": "object"}, effect=Effect.EXTERNAL,
         approval=NEVER, func=noop),
    Tool(name="send_reply", description="", parameters={"type": "object"}, effect=Effect.EXTERNAL,
         approval=ALWAYS, func=noop),
)))
"""


@pytest.fixture(autouse=True)
def the_suites_agents_afterwards():
    before = [module.name for module in loaded_modules()]
    yield
    load_agents(before)


def test_an_agent_registered_after_the_load_neither_replaces_a_loaded_one_nor_skips_the_checks(
    tmp_path, monkeypatch
):
    monkeypatch.syspath_prepend(str(tmp_path))
    loaded, late = (f"agents_{uuid.uuid4().hex[:12]}" for _ in range(2))
    (tmp_path / f"{loaded}.py").write_text(textwrap.dedent(LOADED))
    (tmp_path / f"{late}.py").write_text(textwrap.dedent(LATE))
    try:
        load_agents([loaded])
        checked = get_agent("helpdesk")

        with contextlib.suppress(AgentLoadError):  # refused as a load would: fine
            importlib.import_module(late)

        assert get_agent("helpdesk") is checked, "a late register replaced the loaded agent, unchecked"
        assert get_agent("helpdesk").tool("send_reply").needs_approval({})
    finally:
        sys.modules.pop(loaded, None)
        sys.modules.pop(late, None)


def _agent(name: str, *approvals: object) -> Agent:
    def noop(arguments, ctx):
        return {}

    tools = tuple(
        Tool(
            name="send_reply",
            description="",
            parameters={"type": "object"},
            effect=Effect.EXTERNAL,
            approval=approval,
            func=noop,
        )
        for approval in approvals
    )
    return Agent(name=name, system_prompt="", tools=tools)


def test_a_late_agent_of_a_new_name_gets_the_loads_checks():
    """No agent of that name is loaded: the name check does not apply, the load's do."""
    load_agents(["agents.demo"])
    name = f"late_{uuid.uuid4().hex[:8]}"

    with pytest.raises(AgentLoadError) as refused:
        register(_agent(name, NEVER, ALWAYS))

    assert refused.value.problem == f"agent {name!r}: two tools named 'send_reply'"
    assert name not in agent_names()


def test_a_late_agent_replaces_a_loaded_one_only_when_it_says_so():
    load_agents(["agents.demo"])
    loaded = get_agent("demo")
    redeployed = _agent("demo", NEVER)

    with pytest.raises(AgentLoadError) as refused:
        register(redeployed)
    assert refused.value.problem == (
        "agent 'demo' is already loaded (by 'agents.demo'); "
        "a register after the load replaces none unless it passes replace=True"
    )
    assert get_agent("demo") is loaded

    register(redeployed, replace=True)
    assert get_agent("demo") is redeployed
