"""Pinned definitions (the "rug pull" defence): a tool as a server serves it, its digest, and
the seam with the desk's pin store (`reviewdesk.mcp.pins`). The first sight of a server pins its
tools; a tool served differently, gone, or added later is refused until an admin accepts it."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from agents.canonical import sha256_hex

# The annotations a pin covers: what `trust_annotations=True` reads to set a tool's effect kind,
# and what a reviewer may read as the tool's own claim (the title is left out: display only).
PINNED_HINTS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")

# The tool names the desk pins (the MCP specification's recommended names): any other is
# refused, never pinned, as an admin's page and URLs could not name it safely.
TOOL_NAME_PATTERN = re.compile(r"[A-Za-z0-9_.-]{1,128}")


def tool_name_acceptable(name: str) -> bool:
    return TOOL_NAME_PATTERN.fullmatch(name) is not None


@dataclass(frozen=True)
class ToolDefinition:
    """A tool as a server serves it. `digest` covers what the model and the reviewer are
    shown, what an edit is checked against and what may decide how a call runs: the name,
    description, input schema and the annotations' four hints (`PINNED_HINTS`; with
    `trust_annotations=True` they set the tool's effect kind)."""

    server: str
    name: str
    description: str
    input_schema: dict[str, Any]
    annotations: dict[str, Any] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        """SHA-256 (hex) of the RFC 8785 canonical JSON of {name, description, inputSchema,
        annotations}, the annotations cut to the hints of `PINNED_HINTS` the server sent."""
        return sha256_hex(
            {
                "name": self.name,
                "description": self.description,
                "inputSchema": self.input_schema,
                "annotations": self.pinned_hints,
            }
        )

    @property
    def pinned_hints(self) -> dict[str, Any]:
        """The annotations' hints the pin covers, as served (a hint not sent is left out)."""
        return {hint: self.annotations[hint] for hint in PINNED_HINTS if hint in self.annotations}

    def to_dict(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema,
            "annotations": self.annotations,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolDefinition:
        return cls(
            server=str(data["server"]),
            name=str(data["name"]),
            description=str(data.get("description") or ""),
            input_schema=dict(data.get("inputSchema") or {}),
            annotations=dict(data.get("annotations") or {}),
        )


class PinState(StrEnum):
    PINNED = "pinned"  # served as pinned
    NEW = "new"  # first sight: now recorded and pinned
    CHANGED = "changed"  # served differently from its pin: refused until an admin accepts
    GONE = "gone"  # pinned but no longer served: refused


RUNNABLE_STATES = frozenset({PinState.PINNED, PinState.NEW})


class PinStore(Protocol):
    def reconcile(self, server: str, served: Sequence[ToolDefinition]) -> dict[str, PinState]:
        """Compare what `server` serves now with its pins; pin first-seen definitions. For a
        CHANGED or GONE tool, record the served definition (or its absence) as awaiting an
        admin and raise the admin notice once. Returns the state of every pinned or served tool."""
        ...

    def pinned(self, server: str) -> list[ToolDefinition]:
        """The accepted definitions of `server`'s tools."""
        ...


class InMemoryPinStore:
    """A `PinStore` in memory, for the runtime's tests and the in-memory host. `accept` does
    what `manage.py mcp_tools --accept SERVER` does on the desk."""

    def __init__(self) -> None:
        self.pins: dict[str, dict[str, ToolDefinition]] = {}
        self.awaiting: dict[str, dict[str, ToolDefinition | None]] = {}
        self.notices: list[tuple[str, str, PinState]] = []

    def reconcile(self, server: str, served: Sequence[ToolDefinition]) -> dict[str, PinState]:
        first_sight = server not in self.pins  # only a server's first sight is trusted
        pins = self.pins.setdefault(server, {})
        awaiting = self.awaiting.setdefault(server, {})
        served_by_name = {d.name: d for d in served}
        states: dict[str, PinState] = {}
        for name, definition in served_by_name.items():
            pin = pins.get(name)
            if pin is None and first_sight and tool_name_acceptable(name):
                pins[name] = definition
                states[name] = PinState.NEW
            elif pin is None:  # added to a server already seen, or a name refused: an admin's
                states[name] = self._await(server, name, definition, PinState.CHANGED)
            elif pin.digest == definition.digest:
                states[name] = PinState.PINNED
                awaiting.pop(name, None)
            else:
                states[name] = self._await(server, name, definition, PinState.CHANGED)
        for name in pins.keys() - served_by_name.keys():
            states[name] = self._await(server, name, None, PinState.GONE)
        return states

    def _await(self, server: str, name: str, served: ToolDefinition | None, state: PinState) -> PinState:
        awaiting = self.awaiting[server]
        if name not in awaiting or awaiting[name] != served:
            awaiting[name] = served
            self.notices.append((server, name, state))  # once per new served definition
        return state

    def pinned(self, server: str) -> list[ToolDefinition]:
        return list(self.pins.get(server, {}).values())

    def accept(self, server: str) -> None:
        pins = self.pins.setdefault(server, {})
        for name, served in self.awaiting.pop(server, {}).items():
            if served is None:
                pins.pop(name, None)
            elif tool_name_acceptable(name):
                pins[name] = served


def refusal(tool_name: str, state: PinState) -> str:
    if state == PinState.GONE:
        return (
            f"the MCP tool {tool_name} is no longer served by its server since it was pinned; "
            "an admin must accept the change"
        )
    return f"the MCP tool {tool_name}'s definition changed since it was pinned; an admin must accept it"
