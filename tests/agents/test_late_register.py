"""Review of issue 36's all-or-nothing loading: an agent `register`ed after the load (a DESK_AGENTS
module that imports another lazily, on its first call in a worker) is usable at once, unchecked,
in that process only. Here it replaces the loaded `helpdesk` by one with two tools named
send_reply, the first NEVER: `Agent.tool` finds that one, so the call runs with no human."""

from __future__ import annotations

import contextlib
import importlib
import sys
import textwrap
import uuid

import pytest

from agents.registry import AgentLoadError, get_agent, load_agents, loaded_modules

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
