"""Where a call's request goes: its targets (usernames and "group:NAME") when it is raised.

The runtime names targets (`agents.routing`: a tool's or agent's routes over the arguments);
the run may name reviewers when submitted. Whether a person is among those a request's
targets admit is `access.may_decide`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agents.registry import UnknownAgent, get_agent
from reviewdesk.approvals.access import named_by
from reviewdesk.runs.models import Run

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def named_for_call(user: User, run: Run, tool_name: str, arguments: dict[str, Any]) -> bool:
    """Whether this call of `run`, were its request raised now, would be routed to `user`: named
    by the targets it would get (`targets_for_call`) and in its tool's quorum groups. A standing
    grant stands in for that decision, so its maker must pass this (and four eyes) at every use."""
    try:
        tool = get_agent(run.agent).tool(tool_name)
    except UnknownAgent:
        tool = None
    groups = tool.quorum.groups if tool is not None else ()
    return named_by(user, targets_for_call(run=run, tool_name=tool_name, arguments=arguments), groups)


def targets_for_call(*, run: Run, tool_name: str, arguments: dict[str, Any]) -> list[str]:
    """Who must decide a call, when its request is raised: the tool's routes, then the
    agent's, then the reviewers the run named (none: any reviewer)."""
    try:
        agent = get_agent(run.agent)
    except UnknownAgent:
        return list(run.reviewers)
    tool = agent.tool(tool_name)
    named = agent.deciders(tool, arguments) if tool is not None else None
    return list(named) if named is not None else list(run.reviewers)
