"""The desk's side of loading DESK_AGENTS (reviewdesk/agent_modules): the world the modules name
must be usable too, and a failure leaves no agent of the set usable. In process; the start-up
refusals of real processes are in test_agent_modules_at_start.py."""

from __future__ import annotations

import sys
import textwrap
import uuid

import pytest
from django.test import override_settings

from agents.registry import agent_names, loaded_modules
from reviewdesk.agent_modules.loading import agents_problem, load_configured_agents
from reviewdesk.demo.world import DjangoDemoWorld
from reviewdesk.lib.tool_world import tool_world


@pytest.fixture(autouse=True)
def the_suites_agents_afterwards():
    yield
    load_configured_agents()  # the suite's own DESK_AGENTS, as Django loaded them


@pytest.fixture
def module_naming(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    written = []

    def write(world: str) -> str:
        module = f"desk_agents_{uuid.uuid4().hex[:12]}"
        (tmp_path / f"{module}.py").write_text(
            textwrap.dedent(f"""
            from agents.registry import Agent, register
            TOOL_WORLD = {world!r}
            register(Agent(name={module!r}, system_prompt="", tools=()))
            """)
        )
        written.append(module)
        return module

    yield write
    for module in written:
        sys.modules.pop(module, None)


def test_the_default_world_follows_the_default_agents():
    assert [m.name for m in loaded_modules()] == ["agents.demo"]
    assert type(tool_world()) is DjangoDemoWorld


def test_a_world_that_cannot_be_imported_names_the_module_and_leaves_no_agent(module_naming):
    module = module_naming("myco.no_such_world.World")

    with override_settings(DESK_AGENTS=[module]):
        problem = load_configured_agents()

    assert problem is not None and problem == agents_problem()
    assert problem.startswith(
        f"DESK_AGENTS: agent module {module!r}: its TOOL_WORLD 'myco.no_such_world.World'"
    )
    assert agent_names() == []


def test_two_modules_naming_different_worlds_ask_for_desk_tool_world(module_naming):
    module = module_naming("agents.testing.world.RecordingWorld")

    with override_settings(DESK_AGENTS=["agents.demo", module]):
        problem = load_configured_agents()
    assert problem is not None and "set DESK_TOOL_WORLD" in problem
    assert "'agents.demo'" in problem and repr(module) in problem
    assert agent_names() == []

    with override_settings(
        DESK_AGENTS=["agents.demo", module], DESK_TOOL_WORLD="agents.testing.world.RecordingWorld"
    ):
        assert load_configured_agents() is None
        assert agent_names() == sorted(["demo", module])
