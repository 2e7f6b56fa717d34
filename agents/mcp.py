"""MCP servers as tool sources: the pinned-definition seam only.

A minimal stand-in for the MCP client module (the client itself lives beside these types once
merged): the definition a server serves for one tool, its digest, the pin states, and the
store the desk keeps pins in (`reviewdesk.mcp.pins.DjangoPinStore`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from agents.canonical import sha256_hex


@dataclass(frozen=True)
class ToolDefinition:
    """One tool as a server serves it."""

    server: str
    name: str
    description: str
    input_schema: dict[str, Any]
    annotations: dict[str, Any] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        """SHA-256 hex of the RFC 8785 canonical JSON of what the model and the gate rely on:
        the name, the description and the input schema (annotations are hints, not pinned)."""
        return sha256_hex(
            {"name": self.name, "description": self.description, "inputSchema": self.input_schema}
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema,
            "annotations": self.annotations,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolDefinition:
        return cls(
            server=data["server"],
            name=data["name"],
            description=data.get("description") or "",
            input_schema=dict(data.get("inputSchema") or {}),
            annotations=dict(data.get("annotations") or {}),
        )


class PinState(StrEnum):
    PINNED = "pinned"  # served as accepted
    NEW = "new"  # first seen now, pinned as served
    CHANGED = "changed"  # served otherwise than accepted: refused until an admin accepts
    GONE = "gone"  # pinned, no longer served: refused


class PinStore(Protocol):
    def reconcile(self, server: str, served: Sequence[ToolDefinition]) -> dict[str, PinState]:
        """Each served tool's state, and each pinned tool no longer served (GONE). Records
        first-seen definitions as pins (audited); records a served definition that differs from
        its pin (or a pin's absence) as awaiting an admin, and raises the admin notice once."""
        ...

    def pinned(self, server: str) -> list[ToolDefinition]:
        """The accepted definitions of `server`'s tools."""
        ...
