"""An admin accepts what an MCP server serves now: the page's Accept, `mcp_tools --accept`.

`pin_check_accept` authorizes, locks the pin and checks that the server still serves what the
admin saw; `pin_do_accept` signs the acceptance with the desk's key (web tier) and writes it.
Accepting a tool the server no longer serves removes its pin: should the server serve it again,
it is a new tool, pinned on first sight like any other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import transaction
from django.utils import timezone

from agents.mcp import ToolDefinition
from reviewdesk.accounts.roles import is_admin
from reviewdesk.audit.services import audit_record
from reviewdesk.lib.errors import Conflict, Forbidden, NotFound
from reviewdesk.mcp.models import PendingState, ToolPin
from reviewdesk.mcp.pins import SUBJECT, subject_id
from reviewdesk.mcp.seals import sign_acceptance

# Who accepted, in the signed record, when the operator's command did (audited as "system").
BY_COMMAND = "system (manage.py mcp_tools)"

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def pin_check_accept(*, admin: User | None, server: str, tool: str, digest: str) -> ToolPin:
    """The pin, locked, that `admin` (None: the operator's command) may accept as served with
    `digest` ("" for a tool no longer served). Call inside a transaction."""
    if admin is not None and not is_admin(admin):
        raise Forbidden("only an admin may accept an MCP tool's definition")
    pin = ToolPin.objects.select_for_update().filter(server=server, tool=tool).first()
    if pin is None:
        raise NotFound(f"no pinned tool {tool!r} on {server!r}")
    if not pin.pending_state:
        raise Conflict(f"{server}/{tool} is served as pinned: nothing to accept")
    # What the admin saw is what is accepted: a server that changed again since is refused, and
    # so is a pending definition whose own digest is not the one shown (a row rewritten since).
    served = "" if pin.pending_definition is None else ToolDefinition.from_dict(pin.pending_definition).digest
    if pin.pending_digest != digest or served != digest:
        raise Conflict(
            f"{server}/{tool} changed again since this page was loaded: review it again", code="stale"
        )
    return pin


def pin_do_accept(*, pin: ToolPin, admin: User | None) -> ToolPin | None:
    """Accept the locked pin's pending definition (or its absence); audited. Returns the new
    pin, or None when the tool's pin was removed."""
    server, tool, previous = pin.server, pin.tool, pin.digest
    data = {
        "server": server,
        "tool": tool,
        "previous_digest": previous,
        "accepted_digest": pin.pending_digest,
    }
    if pin.pending_state == PendingState.GONE:
        pin.delete()
        audit_record(
            actor=admin,
            action="mcp_tool.accepted",
            subject_type=SUBJECT,
            subject_id=subject_id(server, tool),
            data={**data, "removed": True},
        )
        return None
    assert pin.pending_definition is not None
    definition = ToolDefinition.from_dict(pin.pending_definition)
    now = timezone.now()
    name = admin.get_username() if admin is not None else BY_COMMAND
    key_id, signature = sign_acceptance(
        server=server, tool=tool, digest=definition.digest, admin=name, at=now
    )
    pin.definition, pin.digest = definition.to_dict(), definition.digest
    pin.accepted_by, pin.accepted_by_name, pin.accepted_at = admin, name, now
    pin.key_id, pin.signature = key_id, signature
    pin.pending_state, pin.pending_definition, pin.pending_digest = PendingState.NONE, None, ""
    pin.pending_since, pin.pending_reason = None, ""
    pin.save()
    audit_record(
        actor=admin,
        action="mcp_tool.accepted",
        subject_type=SUBJECT,
        subject_id=subject_id(server, tool),
        data={**data, "key_id": key_id, "signature": signature, "accepted_at": now.isoformat()},
    )
    return pin


def pin_accept(*, admin: User | None, server: str, tool: str, digest: str) -> ToolPin | None:
    with transaction.atomic():
        pin = pin_check_accept(admin=admin, server=server, tool=tool, digest=digest)
        return pin_do_accept(pin=pin, admin=admin)


def server_accept(*, server: str) -> list[str]:
    """Accept every pending definition of `server` as served now (the operator's command:
    audited as "system"); the tools accepted, by name."""
    with transaction.atomic():
        pending = list(
            ToolPin.objects.select_for_update()
            .filter(server=server)
            .exclude(pending_state=PendingState.NONE)
            .order_by("tool")
        )
        for pin in pending:
            pin_do_accept(pin=pin, admin=None)
    return [pin.tool for pin in pending]
