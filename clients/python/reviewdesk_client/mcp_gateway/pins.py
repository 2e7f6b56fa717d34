"""Pinned tool definitions for the gateway: the desk's own rule (docs/mcp.md), kept in a file.

The first time the gateway sees its upstream server at all, it pins each tool's definition
(its digest: SHA-256 of the RFC 8785 canonical JSON of name, description, input schema and the
four annotation hints, exactly as `agents.mcp.ToolDefinition.digest` computes it on the desk).
From then on a tool served differently, no longer served, or added later is refused until
someone accepts it (`--accept`), which shows each change first.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from reviewdesk_client.canonical import args_sha256

PINNED_HINTS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
# The MCP specification's recommended tool names, as the desk enforces them: any other name
# is refused and never pinned.
TOOL_NAME_PATTERN = re.compile(r"[A-Za-z0-9_.-]{1,128}")
PINS_FORMAT = 1


class PinState(StrEnum):
    PINNED = "pinned"  # served as pinned
    NEW = "new"  # first sight of the server: pinned now
    CHANGED = "changed"  # served differently from its pin, or added after the first sight
    GONE = "gone"  # pinned but no longer served


RUNNABLE = frozenset({PinState.PINNED, PinState.NEW})


class PinsError(Exception):
    """The pins file cannot be used (unreadable, or it belongs to another server)."""


def tool_name_acceptable(name: str) -> bool:
    return TOOL_NAME_PATTERN.fullmatch(name) is not None


def tool_digest(tool: Mapping[str, Any]) -> str:
    """The digest of a tool as served on the wire (camelCase keys), the desk's formula."""
    annotations = tool.get("annotations") or {}
    return args_sha256(
        {
            "name": tool["name"],
            "description": tool.get("description") or "",
            "inputSchema": tool.get("inputSchema") or {},
            "annotations": {hint: annotations[hint] for hint in PINNED_HINTS if hint in annotations},
        }
    )


@dataclass(frozen=True)
class Change:
    """A tool whose served definition is not its pin: what `--accept` shows and records."""

    name: str
    state: PinState
    pinned: dict[str, Any] | None  # None: added after the first sight
    served: dict[str, Any] | None  # None: no longer served

    def describe(self) -> str:
        old = _pretty(self.pinned)
        new = _pretty(self.served)
        what = {
            PinState.CHANGED: "new tool" if self.pinned is None else "definition changed",
            PinState.GONE: "no longer served",
        }.get(self.state, str(self.state))
        header = f"{self.name}: {what}"
        if self.pinned is not None and self.served is not None:
            header += f" ({tool_digest(self.pinned)[:12]} -> {tool_digest(self.served)[:12]})"
        diff = difflib.unified_diff(old.splitlines(), new.splitlines(), "pinned", "served", lineterm="", n=2)
        return header + "\n" + "\n".join(f"    {line}" for line in diff)


def _pretty(tool: Mapping[str, Any] | None) -> str:
    return "" if tool is None else json.dumps(tool, indent=2, sort_keys=True, ensure_ascii=False)


@dataclass(frozen=True)
class Reconciled:
    """What the gateway serves after comparing the upstream's listing with the pins."""

    states: dict[str, PinState]
    tools: list[dict[str, Any]]  # the definitions to list: served where runnable, else the pin
    changes: list[Change]

    def runnable(self, name: str) -> bool:
        return self.states.get(name) in RUNNABLE


class PinFile:
    """The pins of one upstream server, in a JSON file read afresh on every reconcile (an
    `--accept` in another process takes effect at the gateway's next listing)."""

    def __init__(self, path: Path, server: str) -> None:
        self.path = path
        self.server = server

    def load(self) -> dict[str, dict[str, Any]] | None:
        """The pinned definitions by tool name; None while the server was never seen."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise PinsError(f"cannot read the pins file {self.path}: {exc}") from exc
        if data.get("server") != self.server:
            raise PinsError(
                f"the pins file {self.path} belongs to server {data.get('server')!r}, not {self.server!r}"
            )
        tools = data.get("tools") or {}
        for name, pin in tools.items():
            if tool_digest(pin["definition"]) != pin["digest"]:
                raise PinsError(f"the pin of tool {name} in {self.path} does not match its digest")
        return {name: dict(pin["definition"]) for name, pin in tools.items()}

    def save(self, pins: Mapping[str, Mapping[str, Any]]) -> None:
        data = {
            "format": PINS_FORMAT,
            "server": self.server,
            "tools": {
                name: {"digest": tool_digest(definition), "definition": dict(definition)}
                for name, definition in sorted(pins.items())
            },
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Written whole then renamed: a reader never sees half a file.
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(data, handle, indent=2, sort_keys=True, ensure_ascii=False)
                handle.write("\n")
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def reconcile(self, served: Sequence[Mapping[str, Any]]) -> Reconciled:
        """Compare the served tools with the pins; on the server's first sight, pin them."""
        pins = self.load()
        if pins is None:
            first = {t["name"]: dict(t) for t in served if tool_name_acceptable(t["name"])}
            self.save(first)
            pins = first
            states = {name: PinState.NEW for name in first}
        else:
            states = {}
        return _compare(pins, served, states)

    def differences(self, served: Sequence[Mapping[str, Any]]) -> Reconciled:
        """Compare without pinning anything (`--check`); a server never seen differs in every tool."""
        return _compare(self.load() or {}, served, {})

    def accept(self, served: Sequence[Mapping[str, Any]], names: Iterable[str] | None = None) -> list[Change]:
        """Make the served definitions the pins (only `names`, when given); returns what changed."""
        pins = self.load() or {}
        wanted = None if names is None else set(names)
        accepted = []
        for change in _compare(pins, served, {}).changes:
            if wanted is not None and change.name not in wanted:
                continue
            if change.served is None:
                pins.pop(change.name, None)
            elif tool_name_acceptable(change.name):
                pins[change.name] = change.served
            else:
                continue
            accepted.append(change)
        self.save(pins)
        return accepted


def _compare(
    pins: Mapping[str, dict[str, Any]], served: Sequence[Mapping[str, Any]], states: dict[str, PinState]
) -> Reconciled:
    served_by_name = {t["name"]: dict(t) for t in served}
    tools: list[dict[str, Any]] = []
    changes: list[Change] = []
    for name, definition in served_by_name.items():
        pin = pins.get(name)
        if pin is not None and tool_digest(pin) == tool_digest(definition):
            states.setdefault(name, PinState.PINNED)
            tools.append(definition)  # served unchanged, as the upstream sent it
            continue
        states[name] = PinState.CHANGED
        changes.append(Change(name, PinState.CHANGED, pin, definition))
        if pin is not None:
            tools.append(pin)  # the client keeps seeing what was consented to; calls are refused
    for name in pins.keys() - served_by_name.keys():
        states[name] = PinState.GONE
        changes.append(Change(name, PinState.GONE, pins[name], None))
        tools.append(pins[name])
    return Reconciled(states=states, tools=tools, changes=changes)


def refusal(name: str, state: PinState) -> str:
    if state == PinState.GONE:
        return (
            f"the MCP tool {name} is no longer served by its server since it was pinned; "
            "someone must accept the change (mcp_gateway --accept)"
        )
    return (
        f"the MCP tool {name}'s definition changed since it was pinned; "
        "someone must accept it (mcp_gateway --accept)"
    )
