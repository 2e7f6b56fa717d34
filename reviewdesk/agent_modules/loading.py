"""Loading the DESK_AGENTS modules into the agent registry, once per process (the app's ready()).

All or nothing (agents.registry.load_agents): when one module cannot be imported, declares two
agents with one name, a tool that fails its own checks, or a tool world that cannot be
imported, no agent of the set is usable, and `agents_problem()` says why, naming the module.
"""

from __future__ import annotations

import logging

from django.conf import settings

from agents.registry import AgentLoadError, load_agents, loaded_modules
from reviewdesk.lib.deployment import refuse_to_start
from reviewdesk.lib.tool_world import ToolWorldProblem, tool_world_class, tool_world_path

logger = logging.getLogger(__name__)

_problem: str | None = None


def load_configured_agents() -> str | None:
    """Load DESK_AGENTS; return (and keep, for `agents_problem`) what stops them, or None."""
    global _problem
    _problem = _load(list(settings.DESK_AGENTS))
    if _problem is not None:
        load_agents(())  # nothing of the set stays usable, whatever loaded before the failure
        logger.error("%s", _problem)
    return _problem


def _load(modules: list[str]) -> str | None:
    try:
        load_agents(modules)
    except AgentLoadError as exc:
        return f"DESK_AGENTS: {exc}"
    try:
        path = tool_world_path()
    except ToolWorldProblem as exc:
        return f"DESK_AGENTS: {exc}"
    if path is None:
        return None
    try:
        tool_world_class(path)
    except (ImportError, TypeError) as exc:
        if settings.DESK_TOOL_WORLD:
            return f"DESK_TOOL_WORLD={path!r}: {exc}"
        module = next(m.name for m in loaded_modules() if m.tool_world == path)
        return f"DESK_AGENTS: agent module {module!r}: its TOOL_WORLD {path!r} cannot be used: {exc}"
    return None


def agents_problem() -> str | None:
    """Why this process's agents are unusable (naming the module), or None when they loaded."""
    return _problem


def not_loaded_here(agent: str) -> str:
    """Why this process cannot use the agent a run or a request names: its DESK_AGENTS list
    loads no module that registers it (another process's list may)."""
    return f"the agent {agent!r} is not loaded in this process (DESK_AGENTS={','.join(settings.DESK_AGENTS)})"


def loaded_agents_line() -> str:
    """The agents loaded and their modules, for the launcher: `demo (agents.demo)`."""
    shown = [f"{', '.join(m.agents) or 'no agent'} ({m.name})" for m in loaded_modules()]
    return "; ".join(shown) or "none (DESK_AGENTS is empty)"


def refuse_to_start_if_broken(process: str) -> None:
    """For the processes that serve or run (web, worker, beat, `make run`): exit with EX_CONFIG
    and the problem on stderr rather than start with none of the configured agents."""
    if _problem is not None:
        refuse_to_start(process, _problem)
