"""`manage.py agents [--json]`: every loaded agent, its tools, and how each call of them is
gated. The text is for a terminal; `--json` prints `agents.catalog`'s documented shape."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from agents.catalog import describe_agent
from agents.registry import agent_names, get_agent

COLUMNS = ("TOOL", "EFFECT", "APPROVAL", "QUORUM", "GRANTS", "DEVICE KEY", "SOURCE")


def agents_described() -> list[dict[str, Any]]:
    return [describe_agent(get_agent(name)) for name in agent_names()]


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
        "tool comes from (a module, or an MCP server and its pin). --json for scripts."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--json",
            action="store_true",
            dest="as_json",
            help='print {"agents": [...]} as JSON (its shape: agents/catalog.py)',
        )

    def handle(self, *args: Any, as_json: bool, **options: Any) -> None:
        described = agents_described()
        if as_json:
            self.stdout.write(json.dumps({"agents": described}, indent=2, default=str))
            return
        if not described:
            self.stdout.write("no agents loaded (DESK_AGENTS names none)")
            return
        blocks = ["\n".join(agent_text(agent)) for agent in described]
        self.stdout.write("\n\n".join(blocks))
