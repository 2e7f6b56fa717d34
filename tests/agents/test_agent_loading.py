"""Loading agent modules (agents.registry.load_agents): all or nothing, each failure named by
its module; the set loaded is the set usable, whatever was imported before."""

from __future__ import annotations

import sys
import textwrap
import uuid

import pytest

from agents.registry import AgentLoadError, UnknownAgent, agent_names, get_agent, load_agents, loaded_modules

AGENT = """
from agents.registry import Agent, register
from agents.tools import ALWAYS, Effect, Tool

def noop(arguments, ctx):
    return {{}}

{world}
register(Agent(name={name!r}, system_prompt="", tools=(
    Tool(name="act", description="", parameters={{"type": "object"}}, effect=Effect.EXTERNAL,
         approval=ALWAYS, func=noop),
)))
"""


@pytest.fixture(autouse=True)
def the_suites_agents_afterwards():
    before = [module.name for module in loaded_modules()]
    yield
    load_agents(before)


@pytest.fixture
def write_module(tmp_path, monkeypatch):
    """Writes an agent module under a fresh name (imports are cached per name) and returns it."""
    monkeypatch.syspath_prepend(str(tmp_path))
    written = []

    def write(agent_name: str, *, world: str | None = None, source: str | None = None) -> str:
        module = f"agents_{uuid.uuid4().hex[:12]}"
        text = (
            source
            if source is not None
            else AGENT.format(name=agent_name, world=f"TOOL_WORLD = {world!r}" if world else "")
        )
        (tmp_path / f"{module}.py").write_text(textwrap.dedent(text))
        written.append(module)
        return module

    yield write
    for module in written:
        sys.modules.pop(module, None)


def test_the_modules_loaded_are_the_agents_usable(write_module):
    first, second = write_module("first", world="myco.world.World"), write_module("second")

    loaded = load_agents([first, second])

    assert agent_names() == ["first", "second"]  # not the demo: only the set given
    assert [(m.name, m.agents, m.tool_world) for m in loaded] == [
        (first, ("first",), "myco.world.World"),
        (second, ("second",), None),
    ]
    with pytest.raises(UnknownAgent):
        get_agent("demo")


def test_one_failing_module_leaves_no_agent_of_the_set_usable(write_module):
    good, broken = write_module("good"), write_module("broken", source="raise RuntimeError('no config')\n")

    with pytest.raises(AgentLoadError) as failure:
        load_agents([good, broken])

    assert failure.value.module == broken
    assert str(failure.value) == f"agent module {broken!r}: failed while importing: RuntimeError: no config"
    assert agent_names() == []
    with pytest.raises(UnknownAgent):
        get_agent("good")


def test_two_agents_with_one_name_across_modules_name_both(write_module):
    first, second = write_module("same"), write_module("same")

    with pytest.raises(AgentLoadError) as failure:
        load_agents([first, second])

    assert failure.value.module == second
    assert failure.value.problem == f"two agents named 'same': registered also by {first!r}"
    assert agent_names() == []


def test_a_module_listed_twice_is_an_error_not_a_duplicate_agent(write_module):
    module = write_module("once")

    with pytest.raises(AgentLoadError, match="listed twice"):
        load_agents([module, module])


def test_a_module_imported_before_the_load_still_brings_its_agents(write_module):
    module = write_module("early")
    __import__(module)  # imported by something else first: its register() ran outside a load

    load_agents([module])

    assert agent_names() == ["early"]


def test_a_tool_names_itself_when_its_declaration_is_wrong(write_module):
    source = AGENT.format(name="x", world="").replace("effect=Effect.EXTERNAL", 'effect="sideways"')
    bad = write_module("x", source=source)

    with pytest.raises(AgentLoadError) as failure:
        load_agents([bad])

    assert "tool 'act': unknown effect kind 'sideways'" in failure.value.problem


def test_two_tools_with_one_name_in_an_agent_stop_the_load(write_module):
    source = (
        AGENT.format(name="twins", world="")
        .replace("tools=(\n", "tools=(\n    TOOL,\n")
        .replace(
            "register(",
            "TOOL = Tool(name='act', description='', parameters={}, effect=Effect.READ, func=noop)\nregister(",
            1,
        )
    )
    twins = write_module("twins", source=source)

    with pytest.raises(AgentLoadError) as failure:
        load_agents([twins])

    assert failure.value.problem == "agent 'twins': two tools named 'act'"
    assert agent_names() == []
