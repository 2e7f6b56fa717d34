"""What the desk shows of the pins: the admins' notice, the review page, the command's list."""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from typing import Any

from django.db.models import Count

from agents.mcp import PINNED_HINTS, tool_name_acceptable
from reviewdesk.mcp.models import PendingState, ToolPin
from reviewdesk.mcp.pins import BAD_NAME, NEW_TOOL, PIN_MISSING
from reviewdesk.mcp.seals import pending_verifies, pin_verifies


@dataclass(frozen=True)
class ServerNotice:
    server: str
    tools: int  # how many of its tools wait for an admin


def pins_awaiting_admin() -> list[ServerNotice]:
    """Per server, the tools whose served definition differs from the pin (or is gone)."""
    rows = (
        ToolPin.objects.exclude(pending_state=PendingState.NONE)
        .values("server")
        .annotate(tools=Count("id"))
        .order_by("server")
    )
    return [ServerNotice(server=row["server"], tools=row["tools"]) for row in rows]


@dataclass(frozen=True)
class PinRow:
    pin: ToolPin
    state: str  # pinned, changed or gone, as the worker last found it
    signed: bool  # the pin's record verifies
    diff: list[tuple[str, str]]  # `definition_diff`, for a changed tool
    sealed: bool = False  # the pending change verifies as a worker's (`seals.pending_verifies`)

    @property
    def label(self) -> str:
        """The state as the page names it: "new tool" or "pin missing" for a tool with no
        accepted definition on a server already seen, "refused name", else the state."""
        if self.pin.definition is None:
            return {NEW_TOOL: "new tool", PIN_MISSING: "pin missing", BAD_NAME: "refused name"}.get(
                self.pin.pending_reason, "new tool"
            )
        return self.state

    @property
    def acceptable(self) -> bool:
        """Whether the page offers Accept: a change a worker sealed, of a tool name the desk takes."""
        return bool(self.pin.pending_state) and self.sealed and tool_name_acceptable(self.pin.tool)

    @property
    def short_digest(self) -> str:
        return self.pin.digest[:12]

    @property
    def pending_short_digest(self) -> str:
        return self.pin.pending_digest[:12]


def definition_text(definition: dict[str, Any] | None) -> str:
    """A definition as an admin reads it: the description, then the input schema, indented,
    then the annotations' hints the pin covers (one a line; "none" when the server sent none)."""
    if definition is None:
        return ""
    schema = json.dumps(definition.get("inputSchema", {}), indent=2, sort_keys=True)
    annotations = definition.get("annotations") or {}
    if not isinstance(annotations, dict):
        annotations = {}
    hints = [f"{hint}: {json.dumps(annotations[hint])}" for hint in PINNED_HINTS if hint in annotations]
    return f"{definition.get('description', '')}\n\n{schema}\n\nannotations:\n" + (
        "\n".join(hints) if hints else "none"
    )


def definition_diff(old: dict[str, Any] | None, new: dict[str, Any] | None) -> list[tuple[str, str]]:
    """Old to new, line by line, each change with three lines of context: ("-", line) removed,
    ("+", line) added, (" ", line) kept, ("…", "") lines left out between two changes."""
    before, after = definition_text(old).splitlines(), definition_text(new).splitlines()
    lines: list[tuple[str, str]] = []
    for group in difflib.SequenceMatcher(None, before, after, autojunk=False).get_grouped_opcodes(3):
        if lines:
            lines.append(("…", ""))
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                lines += [(" ", line) for line in before[i1:i2]]
                continue
            lines += [("-", line) for line in before[i1:i2]]
            lines += [("+", line) for line in after[j1:j2]]
    return lines


def pin_rows(server: str | None = None) -> list[PinRow]:
    pins = ToolPin.objects.order_by("server", "tool")
    if server is not None:
        pins = pins.filter(server=server)
    rows = []
    for pin in pins:
        state = pin.pending_state or "pinned"
        diff = (
            definition_diff(pin.definition, pin.pending_definition)
            if pin.pending_state == PendingState.CHANGED
            else []
        )
        rows.append(
            PinRow(pin=pin, state=state, signed=pin_verifies(pin), diff=diff, sealed=pending_verifies(pin))
        )
    return rows
