"""Agents and their tools. `agents.demo` registers the demo agent."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from agents.mcp import MCPServer, mcp_tools
from agents.providers import ProviderName
from agents.routing import Route, routed_to
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

    def __post_init__(self) -> None:
        try:
            on_expiry = OnApprovalExpired(self.on_approval_expired)  # also accepts the plain string
        except ValueError:
            raise ValueError("on_approval_expired is 'continue' or 'fail'") from None
        object.__setattr__(self, "on_approval_expired", on_expiry)
        object.__setattr__(self, "mcp_servers", tuple(self.mcp_servers))

    def tool(self, name: str) -> Tool | None:
        found = next((t for t in self.tools if t.name == name), None)
        if found is None and self.mcp_servers:
            found = next((t for t in mcp_tools(self.mcp_servers) if t.name == name), None)
        return found

    def all_tools(self) -> tuple[Tool, ...]:
        """The agent's own tools, then its MCP servers' as this process knows them (agents.mcp)."""
        return self.tools + mcp_tools(self.mcp_servers) if self.mcp_servers else self.tools

    def requires_device_decision(self, tool_name: str) -> bool:
        tool = self.tool(tool_name)
        return self.requires_device_keys or bool(tool and tool.requires_device_keys)

    def deciders(self, tool: Tool, arguments: dict[str, Any]) -> tuple[str, ...] | None:
        """Who the tool's routes, then the agent's, name for this call; None when neither does."""
        named = routed_to(tool.routing, arguments)
        return named if named is not None else routed_to(self.routing, arguments)

    def tool_specs(self) -> list[dict[str, Any]]:
        return [t.spec() for t in self.all_tools()]


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
