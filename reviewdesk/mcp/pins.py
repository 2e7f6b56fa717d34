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

Only a server's first sight is trusted: the first time the desk lists a server at all, its
tools are pinned. After that (the server has a pin row, or the audit chain holds an
`mcp_tool` event of it: hash-linked and anchored, so deleting those rows shows in the audit
sweep) a served tool with no pin is recorded as changed, with no accepted definition, and
waits for an admin: a tool added to the server, one that comes back after its "gone" was
accepted, one whose pin row a database writer deleted. A tool whose name the desk does not
accept (`agents.mcp.TOOL_NAME_PATTERN`) is refused the same way and can never be accepted.

Each change recorded is sealed (`seals.seal_pending`) so that an accept signs only what a
worker saw served.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.utils import timezone

from agents.mcp import PinState, ToolDefinition, tool_name_acceptable
from reviewdesk.audit.models import AuditEvent
from reviewdesk.audit.services import audit_record
from reviewdesk.lib.db import atomic_appends_last
from reviewdesk.mcp.models import PendingState, ToolPin
from reviewdesk.mcp.seals import THE_DESK, pending_verifies, pin_verifies, seal_first_sight, seal_pending

SUBJECT = "mcp_tool"
UNSIGNED = "the pin's signed record does not verify"
SERVED_OTHERWISE = "the server serves another definition"
NO_LONGER_SERVED = "the server no longer serves this tool"
NEW_TOOL = "new tool: the server was already pinned; a tool added later waits for an admin"
PIN_MISSING = "pin missing: the desk has pinned this tool before; its pin is gone"
BAD_NAME = "refused: a tool name must be 1 to 128 of A-Z a-z 0-9 _ . -"


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
            first_sight = not pinned and not _server_seen(server)
            for name in sorted(by_name.keys() | pinned.keys()):
                definition = by_name.get(name)
                pin = pinned.get(name)
                if pin is None:
                    assert definition is not None
                    if not tool_name_acceptable(name):
                        pin = _unaccepted(server, definition, BAD_NAME)
                    elif first_sight:
                        pin, created = _pin_first_sight(server, definition)
                        if created:
                            states[name] = PinState.NEW
                            continue
                    else:
                        reason = PIN_MISSING if _tool_seen(server, name) else NEW_TOOL
                        pin = _unaccepted(server, definition, reason)
                if pin.definition is None:  # no admin accepted a definition of it yet
                    state = _compare_unaccepted(pin, definition)
                    if state is not None:
                        states[name] = state
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


def _server_seen(server: str) -> bool:
    """Whether the audit chain holds an event of one of `server`'s tools: the desk listed it
    before. Its rows are hash-linked and anchored: a deletion shows in the audit sweep."""
    return AuditEvent.objects.filter(subject_type=SUBJECT, data__server=server).exists()


def _tool_seen(server: str, tool: str) -> bool:
    return AuditEvent.objects.filter(subject_type=SUBJECT, subject_id=subject_id(server, tool)).exists()


def _unaccepted(server: str, definition: ToolDefinition, reason: str) -> ToolPin:
    """The row, locked, of a served tool with no pin on a server already seen (or with a name
    the desk refuses): no accepted definition, the served one pending. Recorded by `_record_pending`."""
    pin, _ = ToolPin.objects.get_or_create(
        server=server, tool=definition.name, defaults={"pending_reason": reason}
    )
    return ToolPin.objects.select_for_update().get(pk=pin.pk)


def _compare_unaccepted(pin: ToolPin, definition: ToolDefinition | None) -> PinState | None:
    """A row with no accepted definition: what is served waits for an admin (CHANGED); once no
    longer served the row goes (nothing was trusted), and the tool has no state (None)."""
    if definition is None:
        ToolPin.objects.filter(pk=pin.pk).delete()
        return None
    if not tool_name_acceptable(pin.tool):
        reason = BAD_NAME
    else:
        reason = pin.pending_reason if pin.pending_reason in (NEW_TOOL, PIN_MISSING) else NEW_TOOL
    _record_pending(pin, PendingState.CHANGED, definition, reason)
    return PinState.CHANGED


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
                pending_seal="",
            )
        return PinState.PINNED
    _record_pending(pin, PendingState.CHANGED, definition, SERVED_OTHERWISE if trusted else UNSIGNED)
    return PinState.CHANGED


def _record_pending(
    pin: ToolPin, state: PendingState, definition: ToolDefinition | None, reason: str
) -> None:
    digest = definition.digest if definition is not None else ""
    if (
        pin.pending_state == state
        and pin.pending_digest == digest
        and pin.pending_reason == reason
        and pending_verifies(pin)
    ):
        return  # recorded, audited and shown already: once, not per call
    now = timezone.now()
    ToolPin.objects.filter(pk=pin.pk).update(
        pending_state=state,
        pending_definition=definition.to_dict() if definition is not None else None,
        pending_digest=digest,
        pending_since=now,
        pending_reason=reason,
        pending_seal=seal_pending(server=pin.server, tool=pin.tool, state=state, digest=digest),
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
