"""System check of the agent modules, run by `manage.py check` and every command that runs the
checks first (migrate, runserver, ...): a module of DESK_AGENTS that cannot be used is an error."""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error, register

from reviewdesk.agent_modules.loading import agents_problem

HINT = "Fix the module, or remove it from DESK_AGENTS (docs/bring-your-own-agent.md)."


@register()
def agent_modules_load(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    problem = agents_problem()
    return [] if problem is None else [Error(problem, hint=HINT, id="agent_modules.E001")]
