"""Agents and their tools. `agents.demo` registers the demo agent."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agents.tools import Tool


class UnknownAgent(LookupError):
    pass


@dataclass(frozen=True)
class Agent:
    name: str
    system_prompt: str
    tools: tuple[Tool, ...]
    default_model: dict[str, Any] = field(default_factory=lambda: {"provider": "scripted"})
    approval_ttl_seconds: int | None = None  # None: the desk's default
    # When an approval expires: "continue" tells the model it expired; "fail" ends the run.
    on_approval_expired: str = "continue"

    def __post_init__(self) -> None:
        if self.on_approval_expired not in ("continue", "fail"):
            raise ValueError("on_approval_expired is 'continue' or 'fail'")

    def tool(self, name: str) -> Tool | None:
        return next((t for t in self.tools if t.name == name), None)

    def tool_specs(self) -> list[dict[str, Any]]:
        return [t.spec() for t in self.tools]


_AGENTS: dict[str, Agent] = {}


def register(agent: Agent) -> Agent:
    _AGENTS[agent.name] = agent
    return agent


def _load_builtin() -> None:
    import agents.demo  # noqa: F401 - registers itself


def get_agent(name: str) -> Agent:
    _load_builtin()
    try:
        return _AGENTS[name]
    except KeyError:
        raise UnknownAgent(name) from None


def agent_names() -> list[str]:
    _load_builtin()
    return sorted(_AGENTS)
