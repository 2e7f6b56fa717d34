"""Agents and their tools, and the modules that declare them.

An agent module registers its agents when it is imported (`register(Agent(...))` at module
level), as a Django app registers its models. Which modules a process loads is data handed in
by the host: the desk passes its DESK_AGENTS setting to `load_agents` on every web process,
worker and beat. Loading is all or nothing: if one module cannot be imported, or one of its
agents fails its checks, `AgentLoadError` names the module and the problem and no agent of the
set becomes usable. An agent registered outside a load once one has happened (a module imported
lazily) gets the same checks, and replaces no usable agent unless it says `replace=True`.

A module may also name the world its tools act through (`ToolContext.world`) by a dotted path
in a module-level `TOOL_WORLD` string; the host decides what to do with it (the desk
instantiates it, see reviewdesk/lib/tool_world.py).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from agents.mcp import MCPServer, mcp_tools
from agents.providers import ProviderName
from agents.routing import Route, routed_to
from agents.second_opinion import model_spec_problem
from agents.tools import Tool


class UnknownAgent(LookupError):
    pass


class OnApprovalExpired(StrEnum):
    """What a run does when one of its approvals expires."""

    CONTINUE = "continue"  # tell the model the approval expired, and carry on
    FAIL = "fail"  # end the run


@dataclass(frozen=True)
class Agent:
    name: str
    system_prompt: str
    tools: tuple[Tool, ...]
    default_model: dict[str, Any] = field(default_factory=lambda: {"provider": ProviderName.SCRIPTED.value})
    approval_ttl_seconds: int | None = None  # None: the desk's default
    on_approval_expired: OnApprovalExpired = OnApprovalExpired.CONTINUE
    # Every approval of this agent's calls must be signed by the reviewer's device key.
    requires_device_keys: bool = False
    # Defaults for tools that set none (see Tool.response_target_seconds, Tool.escalation).
    response_target_seconds: int | None = None
    escalation: tuple[str, ...] = ()
    # Who must decide this agent's calls when the tool's own routes do not say (agents.routing).
    routing: tuple[Route, ...] = ()
    # MCP servers whose tools are this agent's too (agents.mcp; docs/mcp.md).
    mcp_servers: tuple[MCPServer, ...] = ()
    # A model's advisory reading of each gated call (agents.second_opinion): a model spec like a
    # run's; a tool's own `second_opinion` wins. None: no reading. It never decides.
    second_opinion: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        try:
            on_expiry = OnApprovalExpired(self.on_approval_expired)  # also accepts the plain string
        except ValueError:
            raise ValueError("on_approval_expired is 'continue' or 'fail'") from None
        object.__setattr__(self, "on_approval_expired", on_expiry)
        object.__setattr__(self, "mcp_servers", tuple(self.mcp_servers))
        if self.second_opinion is not None:
            problem = model_spec_problem(self.second_opinion)
            if problem:
                raise ValueError(f"agent {self.name!r}: second_opinion: {problem}")

    def tool(self, name: str) -> Tool | None:
        found = next((t for t in self.tools if t.name == name), None)
        if found is None and self.mcp_servers:
            found = next((t for t in mcp_tools(self.mcp_servers) if t.name == name), None)
        return found

    def all_tools(self) -> tuple[Tool, ...]:
        """The agent's own tools, then its MCP servers' as this process knows them (agents.mcp)."""
        return self.tools + mcp_tools(self.mcp_servers) if self.mcp_servers else self.tools

    def second_opinion_for(self, tool_name: str) -> dict[str, Any] | None:
        """The model spec that reads this tool's calls, or None: the tool's own, unless it says
        False (none), else the agent's."""
        tool = self.tool(tool_name)
        own = tool.second_opinion if tool is not None else None
        if own is False:
            return None
        return own if isinstance(own, dict) else self.second_opinion

    def requires_device_decision(self, tool_name: str) -> bool:
        tool = self.tool(tool_name)
        return self.requires_device_keys or bool(tool and tool.requires_device_keys)

    def deciders(self, tool: Tool, arguments: dict[str, Any]) -> tuple[str, ...] | None:
        """Who the tool's routes, then the agent's, name for this call; None when neither does."""
        named = routed_to(tool.routing, arguments)
        return named if named is not None else routed_to(self.routing, arguments)

    def tool_specs(self) -> list[dict[str, Any]]:
        return [t.spec() for t in self.all_tools()]


class AgentLoadError(Exception):
    """A module of the configured set cannot be used: it names the module and the problem."""

    def __init__(self, module: str, problem: str) -> None:
        super().__init__(f"agent module {module!r}: {problem}")
        self.module = module
        self.problem = problem


@dataclass(frozen=True)
class AgentModule:
    """One loaded module: its agents' names, and the world its tools need (a dotted path), if it says."""

    name: str
    agents: tuple[str, ...]
    tool_world: str | None = None


# The usable agents: the last loaded set, plus any `register`ed outside a load (a script, a test).
_AGENTS: dict[str, Agent] = {}
_MODULES: tuple[AgentModule, ...] = ()
# Every agent `register`ed at import time, with the module that called `register`: a module
# imported before `load_agents` (by a test, by another module) is not registered again.
_DECLARED: list[tuple[str, Agent]] = []
# While `load_agents` imports a module: the agents registered meanwhile, in order.
_collecting: list[Agent] | None = None
# Whether a `load_agents` has happened in this process (a register after it is checked).
_loaded = False


def register(agent: Agent, *, replace: bool = False) -> Agent:
    """Declare an agent. Inside `load_agents` it joins the set being loaded, usable only once
    the whole set has loaded; outside one (a script, a test) it is usable at once.

    After a load (a DESK_AGENTS module that imports another lazily, on its first call in a
    worker), an agent registered outside one gets the load's checks (`agent_problem`) and
    replaces no agent already usable unless `replace=True` says it means to (a test that
    redeploys an agent): AgentLoadError names the registering module and the problem, and the
    agent in use stays as it was."""
    caller = sys._getframe(1).f_globals.get("__name__", "")
    _DECLARED.append((caller, agent))
    if _collecting is not None:
        _collecting.append(agent)
        return agent
    if _loaded:
        problem = agent_problem(agent)
        if problem:
            raise AgentLoadError(caller, f"agent {agent.name!r}: {problem}")
        if agent.name in _AGENTS and not replace:
            raise AgentLoadError(
                caller,
                f"agent {agent.name!r} is already loaded ({_loaded_by(agent.name)}); a register "
                "after the load replaces none unless it passes replace=True",
            )
    _AGENTS[agent.name] = agent
    return agent


def _loaded_by(name: str) -> str:
    """Where the usable agent `name` came from, in words."""
    module = next((m.name for m in _MODULES if name in m.agents), None)
    return f"by {module!r}" if module is not None else "registered outside a load"


def load_agents(modules: Sequence[str]) -> tuple[AgentModule, ...]:
    """Import `modules` and make their agents, and only theirs, the usable ones.

    All or nothing: on the first module that cannot be imported, two agents with one name (in
    one module or across two), or an agent whose tools fail their checks, AgentLoadError names
    the module and the problem, and no agent of the set is usable (the registry is left empty,
    so a process that goes on regardless takes no run). Returns the modules loaded."""
    global _AGENTS, _MODULES, _loaded
    _AGENTS, _MODULES, _loaded = {}, (), True
    found: dict[str, tuple[str, Agent]] = {}
    loaded = []
    for index, module in enumerate(modules):
        if module in modules[:index]:
            raise AgentLoadError(module, "listed twice in the modules to load")
        agents = _import_agents(module)
        for agent in agents:
            problem = agent_problem(agent)
            if problem:
                raise AgentLoadError(module, f"agent {agent.name!r}: {problem}")
            if agent.name in found:
                other = found[agent.name][0]
                where = "twice in this module" if other == module else f"also by {other!r}"
                raise AgentLoadError(module, f"two agents named {agent.name!r}: registered {where}")
            found[agent.name] = (module, agent)
        world = getattr(sys.modules[module], "TOOL_WORLD", None)
        if world is not None and not isinstance(world, str):
            raise AgentLoadError(module, f"TOOL_WORLD must be a dotted path (a string), not {world!r}")
        loaded.append(AgentModule(name=module, agents=tuple(a.name for a in agents), tool_world=world))
    _AGENTS = {name: agent for name, (_, agent) in found.items()}
    _MODULES = tuple(loaded)
    return _MODULES


def _import_agents(module: str) -> list[Agent]:
    """The agents `module` registers: those registered while it is imported, or, when it was
    imported before, those its own code (or its submodules') registered then."""
    global _collecting
    already = module in sys.modules
    outer, _collecting = _collecting, []
    try:
        importlib.import_module(module)
        collected = _collecting
    except ImportError as exc:
        if exc.name is not None and (module == exc.name or module.startswith(exc.name + ".")):
            raise AgentLoadError(module, f"cannot be imported: no module named {exc.name!r}") from exc
        raise AgentLoadError(module, f"cannot be imported: {type(exc).__name__}: {exc}") from exc
    except Exception as exc:  # a tool's own checks (a bad schema), or any error in the module
        raise AgentLoadError(module, f"failed while importing: {type(exc).__name__}: {exc}") from exc
    finally:
        _collecting = outer
    if already and not collected:
        collected = [agent for name, agent in _DECLARED if name == module or name.startswith(module + ".")]
    return collected


def agent_problem(agent: Agent) -> str | None:
    """What makes the agent unusable, or None: a tool that is not a Tool, or two tools with one
    name. (A Tool checks its own schema and effect kind when it is made.)"""
    names: set[str] = set()
    for tool in agent.tools:
        if not isinstance(tool, Tool):
            return f"{tool!r} is not a Tool"
        if tool.name in names:
            return f"two tools named {tool.name!r}"
        names.add(tool.name)
    return None


def loaded_modules() -> tuple[AgentModule, ...]:
    """The modules of the last `load_agents`, in the order given."""
    return _MODULES


def get_agent(name: str) -> Agent:
    try:
        return _AGENTS[name]
    except KeyError:
        raise UnknownAgent(name) from None


def agent_names() -> list[str]:
    return sorted(_AGENTS)
