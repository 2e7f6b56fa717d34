"""The world the agents' tools act on: the class DESK_TOOL_WORLD names, else the one the agent
modules name.

A tool reaches email, payments and the like only through `ToolContext.world`, which the run's
host fills with `tool_world()` (and `sandbox_config()` for its processes). An agent module names
the world its tools need in a module-level `TOOL_WORLD` dotted path (agents/registry.py); with
DESK_TOOL_WORLD empty (the default) the desk instantiates that one, so the default world follows
the default agents and the core apps import no agent's code. DESK_TOOL_WORLD overrides it for
every agent, and must be set where two loaded modules name different worlds.
"""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from agents.registry import loaded_modules
from agents.sandbox import SandboxConfig, SandboxMode, SandboxUnavailable, chosen_mode, run_uid


class ToolWorldProblem(ValueError):
    """The world cannot be chosen: two modules name different ones, or the path names no class."""


@lru_cache(maxsize=8)
def tool_world_class(dotted_path: str) -> type[Any]:
    # Keyed by the path, so override_settings in a test picks up another world.
    world_class = import_string(dotted_path)
    if not isinstance(world_class, type):
        raise TypeError(f"{dotted_path!r} names {world_class!r}, not a class")
    return world_class


def tool_world_path() -> str | None:
    """DESK_TOOL_WORLD, else the one world the loaded agent modules name; None when none does."""
    if settings.DESK_TOOL_WORLD:
        return str(settings.DESK_TOOL_WORLD)
    named = {module.tool_world: module.name for module in loaded_modules() if module.tool_world}
    if len(named) > 1:
        which = ", ".join(f"{module!r} names {path}" for path, module in named.items())
        raise ToolWorldProblem(
            f"the agent modules name different tool worlds ({which}): set DESK_TOOL_WORLD to one "
            "class that serves them all"
        )
    return next(iter(named), None)


def tool_world() -> Any:
    """A fresh instance of the world's class, for one tool call's context (None: no world named)."""
    path = tool_world_path()
    return tool_world_class(path)() if path else None


def sandbox_config() -> SandboxConfig:
    """How tools that start processes are isolated, from the DESK_SANDBOX* settings: the same
    for the call that runs and for the preview a reviewer reads before approving it."""
    return SandboxConfig(
        mode=SandboxMode(settings.DESK_SANDBOX),
        cpu_seconds=settings.DESK_SANDBOX_CPU_SECONDS,
        memory_bytes=settings.DESK_SANDBOX_MEMORY_MB << 20,
        file_size_bytes=settings.DESK_SANDBOX_FILE_MB << 20,
        max_processes=settings.DESK_SANDBOX_PROCESSES,
        scratch_bytes=settings.DESK_SANDBOX_SCRATCH_MB << 20,
        keep_seconds=settings.DESK_SANDBOX_KEEP_HOURS * 3600,
        bwrap=settings.DESK_SANDBOX_BWRAP,
    )


def sandbox_problem() -> str | None:
    """Why shell commands will be refused on this machine (DESK_SANDBOX=bwrap, the default with
    DEBUG off, where bubblewrap cannot run), naming the setting; None when they can run."""
    config = sandbox_config()
    if config.mode != SandboxMode.BWRAP:
        return None
    try:
        chosen_mode(config, as_uid=run_uid("probe") if os.geteuid() == 0 else None)
    except SandboxUnavailable as exc:
        return str(exc)
    except OSError as exc:  # the probe's directory
        return f"bubblewrap could not be probed: {exc}"
    return None


def sandbox_status() -> str:
    """One line for the launcher: the mode commands run in, or why they are refused."""
    problem = sandbox_problem()
    if problem:
        return f"REFUSED: {problem}"
    return {
        SandboxMode.BWRAP: "bubblewrap (DESK_SANDBOX=bwrap)",
        SandboxMode.AUTO: "bubblewrap where it can run, else basic (DESK_SANDBOX=auto)",
        SandboxMode.BASIC: "basic, without namespaces (DESK_SANDBOX=basic)",
    }[SandboxMode(settings.DESK_SANDBOX)]
