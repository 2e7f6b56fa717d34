"""The world the agents' tools act on, chosen by the DESK_TOOL_WORLD setting.

A tool reaches email, payments and the like only through `ToolContext.world`,
which the run's host fills with `tool_world()` (and `sandbox_config()` for its processes). The default is the demo
agent's world on Django (`reviewdesk.demo.world.DjangoDemoWorld`); a deployment
with its own agents names its own class, so the core apps import no demo code.
"""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from agents.sandbox import SandboxConfig, SandboxMode, SandboxUnavailable, chosen_mode, run_uid


@lru_cache(maxsize=8)
def _world_class(dotted_path: str) -> type[Any]:
    # Keyed by the path, so override_settings in a test picks up another world.
    world_class = import_string(dotted_path)
    if not isinstance(world_class, type):
        raise TypeError(f"DESK_TOOL_WORLD={dotted_path!r} names {world_class!r}, not a class")
    return world_class


def tool_world() -> Any:
    """A fresh instance of the DESK_TOOL_WORLD class, for one tool call's context."""
    return _world_class(settings.DESK_TOOL_WORLD)()


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
