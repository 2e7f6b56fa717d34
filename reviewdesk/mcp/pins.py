"""`DjangoPinStore`: the worker's side of pinned MCP tool definitions (`agents.mcp.PinStore`).

`reconcile` runs where a server's tools were just listed: each served definition is compared
with its pin, in one transaction per server. Lock order: the server's pins by tool name. A tool
seen for the first time is pinned with `get_or_create` on the (server, tool) unique
constraint, so two workers listing the same server at once make one pin: the second waits on
the first's insert, then reads its row (and audits nothing). Every existing pin is read under
`select_for_update`, so a change is recorded once, by whichever worker comes first; the other
finds it recorded and neither audits nor notifies again.

When the server serves exactly its trusted pins and nothing is recorded against them (the
common case), an unlocked read says so and nothing is locked or written.

A pin is trusted only when its signed record verifies (`seals.pin_verifies`); one that does
not is treated as changed, whatever it says, until an admin accepts what the server serves.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.utils import timezone

from agents.mcp import PinState, ToolDefinition
from reviewdesk.audit.services import audit_record
from reviewdesk.lib.db import atomic_appends_last
from reviewdesk.mcp.models import PendingState, ToolPin
from reviewdesk.mcp.seals import THE_DESK, pin_verifies, seal_first_sight

SUBJECT = "mcp_tool"
UNSIGNED = "the pin's signed record does not verify"
SERVED_OTHERWISE = "the server serves another definition"
NO_LONGER_SERVED = "the server no longer serves this tool"


def subject_id(server: str, tool: str) -> str:
    return f"{server}/{tool}"


class DjangoPinStore:
    """Pins in the desk's database; instantiated with no arguments by the worker's run host."""

    def reconcile(self, server: str, served: Sequence[ToolDefinition]) -> dict[str, PinState]:
        by_name = {definition.name: definition for definition in served}
        if _served_as_pinned(server, by_name):
            return dict.fromkeys(by_name, PinState.PINNED)
        states: dict[str, PinState] = {}
        # Audit rows at the block's end: the writers' lock is not held while this worker waits
        # on another's insert of a pin (which waits on that lock to audit it: a deadlock).
        with atomic_appends_last():
            pinned = {
                pin.tool: pin
                for pin in ToolPin.objects.select_for_update().filter(server=server).order_by("tool")
            }
            for name in sorted(by_name.keys() | pinned.keys()):
                definition = by_name.get(name)
                pin = pinned.get(name)
                if pin is None:
                    assert definition is not None
                    pin, created = _pin_first_sight(server, definition)
                    if created:
                        states[name] = PinState.NEW
                        continue
                states[name] = _compare(pin, definition)
        return states

    def pinned(self, server: str) -> list[ToolDefinition]:
        pins = ToolPin.objects.filter(server=server).order_by("tool")
        return [ToolDefinition.from_dict(pin.definition) for pin in pins if pin_verifies(pin)]


def _served_as_pinned(server: str, by_name: dict[str, ToolDefinition]) -> bool:
    """Whether the server serves exactly its trusted pins, with nothing recorded against them:
    the common case, read without a lock (it writes nothing), so that workers listing a
    server's tools do not queue on its pins' row locks. Anything else takes the locked path."""
    pins = list(ToolPin.objects.filter(server=server))
    if {pin.tool for pin in pins} != by_name.keys():
        return False
    return all(
        not pin.pending_state and pin.digest == by_name[pin.tool].digest and pin_verifies(pin) for pin in pins
    )


def _pin_first_sight(server: str, definition: ToolDefinition) -> tuple[ToolPin, bool]:
    """The pin of a tool no pin of which was read: made now (and audited), or, when another
    worker made it meanwhile, that one, locked."""
    now = timezone.now()
    digest = definition.digest
    key_id, seal = seal_first_sight(server=server, tool=definition.name, digest=digest, at=now)
    pin, created = ToolPin.objects.get_or_create(
        server=server,
        tool=definition.name,
        defaults={
            "definition": definition.to_dict(),
            "digest": digest,
            "accepted_by_name": THE_DESK,
            "accepted_at": now,
            "key_id": key_id,
            "signature": seal,
        },
    )
    if created:
        audit_record(
            actor=None,
            action="mcp_tool.pinned",
            subject_type=SUBJECT,
            subject_id=subject_id(server, definition.name),
            data={"server": server, "tool": definition.name, "digest": digest},
        )
        return pin, True
    return ToolPin.objects.select_for_update().get(pk=pin.pk), False


def _compare(pin: ToolPin, definition: ToolDefinition | None) -> PinState:
    """Compare a locked pin with what the server serves (None: nothing); record a difference
    the first time it is seen."""
    if definition is None:
        _record_pending(pin, PendingState.GONE, None, NO_LONGER_SERVED)
        return PinState.GONE
    trusted = pin_verifies(pin)
    if trusted and definition.digest == pin.digest:
        if pin.pending_state:  # the server serves the accepted definition again
            ToolPin.objects.filter(pk=pin.pk).update(
                pending_state=PendingState.NONE,
                pending_definition=None,
                pending_digest="",
                pending_since=None,
                pending_reason="",
            )
        return PinState.PINNED
    _record_pending(pin, PendingState.CHANGED, definition, SERVED_OTHERWISE if trusted else UNSIGNED)
    return PinState.CHANGED


def _record_pending(
    pin: ToolPin, state: PendingState, definition: ToolDefinition | None, reason: str
) -> None:
    digest = definition.digest if definition is not None else ""
    if pin.pending_state == state and pin.pending_digest == digest and pin.pending_reason == reason:
        return  # recorded, audited and shown already: once, not per call
    now = timezone.now()
    ToolPin.objects.filter(pk=pin.pk).update(
        pending_state=state,
        pending_definition=definition.to_dict() if definition is not None else None,
        pending_digest=digest,
        pending_since=now,
        pending_reason=reason,
    )
    audit_record(
        actor=None,
        action=f"mcp_tool.{state}",
        subject_type=SUBJECT,
        subject_id=subject_id(pin.server, pin.tool),
        data={
            "server": pin.server,
            "tool": pin.tool,
            "pinned_digest": pin.digest,
            "served_digest": digest,
            "reason": reason,
        },
    )
