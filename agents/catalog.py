"""What is loaded, described: each agent's tools with their effect kind, approval policy,
routing, quorum, grants, device keys and where each comes from.

One description for every reader: `manage.py agents` prints it (as text, or as JSON with
`--json`), and the API's `GET /api/v1/agents` answers a part of it (`reviewdesk.api.
representations.agent_data`). Plain data only: it imports nothing of the desk.

`describe_agent`'s shape (the JSON `manage.py agents --json` prints, one object per agent under
`"agents"`, in name order):

    {"name": "demo",
     "requires_device_keys": false,          # every call of this agent needs a device signature
     "routing": [ROUTE, ...],                # the agent's own routes, used when a tool's say nothing
     "mcp_servers": [                        # the MCP servers its tools may come from
       {"name": "orders", "transport": "stdio", "target": "orders-mcp --db /srv/orders",
        "state": "up" | "down" | null,       # null: not probed (the API); `manage.py agents` probes
        "error": null}],                     # why it is down
     "tools": [
       {"name": "refund_payment",
        "description": "...",
        "parameters": {...},                 # the tool's JSON Schema
        "effect": "database",                # read | database | idempotent_external | external
        "approval": "depends",               # always | never | depends (a function of the arguments)
        "policy": "agents.demo.refund_needs_approval",   # or "ALWAYS" / "NEVER"
        "routing": [ROUTE, ...],             # the routes that apply, in order: the tool's, then the agent's
        "quorum": {"required": 1, "groups": []},
        "grantable": true,                   # whether a standing grant may allow a call
        "requires_device_keys": false,       # the tool's or its agent's
        "output_trusted": true,              # its output counts as the desk's own truth (agents.provenance)
        "aimed": ["/order_id", "/amount"],   # the arguments that aim the effect; null: all of them
        "second_opinion": false,             # a model reads each call as advice (agents.second_opinion)
        "source": {"kind": "module", "name": "agents.demo", "pin": null, "state": null}},
       ...]}

where ROUTE is `{"to": ["group:finance"], "when": [{"field": "amount", "op": ">", "value": 1000}],
"from": "tool" | "agent"}`. Keys may be added; none is renamed or removed.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Literal

from agents.tools import ALWAYS, NEVER, ApprovalPolicy, Tool, ToolSource

if TYPE_CHECKING:
    from agents.registry import Agent
    from agents.routing import Route

ApprovalKind = Literal["always", "never", "depends"]


def _unwrapped(func: Any) -> Any:
    while isinstance(func, functools.partial):
        func = func.func
    return func


def _module_of(func: Any) -> str:
    func = _unwrapped(func)
    return getattr(func, "__module__", None) or type(func).__module__


def policy_name(policy: ApprovalPolicy) -> str:
    """ "ALWAYS", "NEVER", or the policy function's qualified name (`agents.demo.refund_needs_approval`)."""
    if policy is ALWAYS:
        return "ALWAYS"
    if policy is NEVER:
        return "NEVER"
    func = _unwrapped(policy)
    qualname = getattr(func, "__qualname__", None) or type(func).__qualname__
    return f"{_module_of(func)}.{qualname}"


def approval_kind(policy: ApprovalPolicy) -> ApprovalKind:
    """Whether a call needs a human: always, never, or depending on its arguments (a policy
    function, which may also read the run's history or the world)."""
    if policy is ALWAYS:
        return "always"
    if policy is NEVER:
        return "never"
    return "depends"


def tool_source(tool: Tool) -> ToolSource:
    """Where the tool comes from: its declared source, else its function's module."""
    return tool.source or ToolSource(kind="module", name=_module_of(tool.func))


def route_data(route: Route, *, origin: str) -> dict[str, Any]:
    return {
        "to": list(route.to),
        "when": [{"field": c.field, "op": c.op, "value": c.value} for c in route.when],
        "from": origin,
    }


def describe_tool(agent: Agent, tool: Tool) -> dict[str, Any]:
    source = tool_source(tool)
    # The tool's routes are asked first, then the agent's (Agent.deciders): one list, in that order.
    routing = [route_data(r, origin="tool") for r in tool.routing]
    routing += [route_data(r, origin="agent") for r in agent.routing]
    return {
        "name": tool.name,
        "description": tool.description,
        "parameters": tool.parameters,
        "effect": tool.effect.value,
        "approval": approval_kind(tool.approval),
        "policy": policy_name(tool.approval),
        "routing": routing,
        "quorum": {"required": tool.quorum.approvals, "groups": list(tool.quorum.groups)},
        "grantable": tool.accepts_grants,
        "requires_device_keys": agent.requires_device_decision(tool.name),
        "output_trusted": tool.trusts_output,
        "aimed": list(tool.aimed) if tool.aimed is not None else None,
        "second_opinion": agent.second_opinion_for(tool.name) is not None,
        "source": {"kind": source.kind, "name": source.name, "pin": source.pin, "state": source.state},
    }


def describe_server(server: Any) -> dict[str, Any]:
    """An MCP server as declared (agents.mcp): never its environment or headers, which may hold
    secrets. Its state is unknown until someone probes it."""
    if hasattr(server, "url"):
        transport, target = "http", str(server.url)
    else:
        transport, target = "stdio", " ".join([str(server.command), *map(str, server.args)])
    return {"name": server.name, "transport": transport, "target": target, "state": None, "error": None}


def describe_agent(agent: Agent) -> dict[str, Any]:
    return {
        "name": agent.name,
        "requires_device_keys": agent.requires_device_keys,
        "routing": [route_data(r, origin="agent") for r in agent.routing],
        "mcp_servers": [describe_server(server) for server in agent.mcp_servers],
        "tools": [describe_tool(agent, tool) for tool in agent.all_tools()],
    }
