"""`manage.py agents [--json]`: every loaded agent, its tools, and how each call of them is
gated. The text is for a terminal; `--json` prints `agents.catalog`'s documented shape."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from agents import mcp
from agents.catalog import describe_agent
from agents.registry import agent_names, get_agent

COLUMNS = ("TOOL", "EFFECT", "APPROVAL", "QUORUM", "GRANTS", "DEVICE KEY", "SOURCE")


def agents_described(*, probe_servers: bool = True) -> list[dict[str, Any]]:
    described = []
    for name in agent_names():
        agent = get_agent(name)
        data = describe_agent(agent)
        if probe_servers and agent.mcp_servers:
            _probed(agent, data)
        described.append(data)
    return described


def _probed(agent: Any, data: dict[str, Any]) -> None:
    """Each MCP server of the agent listed once from this process (a stdio server is started
    and stopped again): up or down, and a down server's tools marked down."""
    down = set()
    try:
        for server, entry in zip(agent.mcp_servers, data["mcp_servers"], strict=True):
            entry["error"] = mcp.probe(server)
            entry["state"] = "down" if entry["error"] else "up"
            if entry["error"]:
                down.add(server.name)
    finally:
        mcp.close_all()
    for tool in data["tools"]:
        source = tool["source"]
        if source["kind"] == "mcp" and source["name"] in down:
            source["state"] = "down"


def server_text(server: dict[str, Any]) -> str:
    state = {"up": "up", "down": f"DOWN: {server['error']}", None: "not probed"}[server["state"]]
    return f"  mcp server {server['name']} ({server['transport']}: {server['target']}): {state}"


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _condition(condition: dict[str, Any]) -> str:
    return f"{condition['field']} {condition['op']} {json.dumps(condition['value'], default=str)}"


def route_text(route: dict[str, Any]) -> str:
    when = " and ".join(_condition(c) for c in route["when"])
    return ", ".join(route["to"]) + (f" when {when}" if when else " always")


def source_text(source: dict[str, Any]) -> str:
    if source["kind"] == "module":
        return source["name"]
    details = [f"pin {source['pin'][:12]}" if source["pin"] else "not pinned"]
    if source["state"]:
        details.append(source["state"])
    return f"{source['kind']}:{source['name']} ({', '.join(details)})"


def quorum_text(quorum: dict[str, Any]) -> str:
    groups = quorum["groups"]
    return str(quorum["required"]) + (f" of {', '.join(groups)}" if groups else "")


def agent_text(agent: dict[str, Any]) -> list[str]:
    tools = agent["tools"]
    lines = [f"{agent['name']}: {len(tools)} tool{'' if len(tools) == 1 else 's'}"]
    if agent["requires_device_keys"]:
        lines.append("  every decision signed by the reviewer's device key")
    for route in agent["routing"]:
        lines.append(f"  routing (when a tool's own routes do not say): {route_text(route)}")
    lines += [server_text(server) for server in agent["mcp_servers"]]
    rows = [
        (
            tool["name"],
            tool["effect"],
            tool["policy"],
            quorum_text(tool["quorum"]),
            _yes(tool["grantable"]),
            _yes(tool["requires_device_keys"]),
            source_text(tool["source"]),
        )
        for tool in tools
    ]
    widths = [max(len(row[i]) for row in [COLUMNS, *rows]) for i in range(len(COLUMNS))]

    def line(cells: tuple[str, ...]) -> str:
        return "  " + "  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)).rstrip()

    lines.append(line(COLUMNS))
    for tool, row in zip(tools, rows, strict=True):
        lines.append(line(row))
        for route in tool["routing"]:
            if route["from"] == "tool":
                lines.append(f"      routing: {route_text(route)}")
    return lines


class Command(BaseCommand):
    help = (
        "List every loaded agent (DESK_AGENTS) with its tools: effect kind, approval policy, "
        "routing, quorum, whether a standing grant may allow a call, device keys, and where each "
        "tool comes from (a module, or an MCP server and its pin), and whether each MCP server "
        "answers now. --json for scripts."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--no-probe",
            action="store_false",
            dest="probe",
            help="do not list each MCP server's tools to say whether it is up",
        )
        parser.add_argument(
            "--json",
            action="store_true",
            dest="as_json",
            help='print {"agents": [...]} as JSON (its shape: agents/catalog.py)',
        )

    def handle(self, *args: Any, as_json: bool, probe: bool, **options: Any) -> None:
        described = agents_described(probe_servers=probe)
        if as_json:
            self.stdout.write(json.dumps({"agents": described}, indent=2, default=str))
            return
        if not described:
            self.stdout.write("no agents loaded (DESK_AGENTS names none)")
            return
        blocks = ["\n".join(agent_text(agent)) for agent in described]
        self.stdout.write("\n\n".join(blocks))
