"""An admin accepts what an MCP server serves now: the page's Accept, `mcp_tools --accept`.

`pin_check_accept` authorizes, locks the pin and checks that the server still serves what the
admin saw; `pin_do_accept` signs the acceptance with the desk's key (web tier) and writes it.
Accepting a tool the server no longer serves removes its pin: should the server serve it again,
it waits for an admin (`pins`: only a server's first sight is trusted). Only a change a worker
recorded and sealed (`seals.pending_verifies`) can be accepted, and never a tool whose name the
desk refuses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import transaction
from django.utils import timezone

from agents.mcp import ToolDefinition, tool_name_acceptable
from reviewdesk.accounts.roles import is_admin
from reviewdesk.audit.services import audit_record
from reviewdesk.lib.errors import Conflict, Forbidden, NotFound
from reviewdesk.mcp.models import PendingState, ToolPin
from reviewdesk.mcp.pins import SUBJECT, subject_id
from reviewdesk.mcp.seals import pending_verifies, sign_acceptance

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
    if not tool_name_acceptable(tool):
        raise Conflict(f"{server}/{tool}: the desk refuses this tool name; it cannot be accepted")
    if not pending_verifies(pin):
        raise Conflict(
            f"{server}/{tool}: the pending definition is not one a worker recorded (its seal does "
            "not verify); it is not accepted"
        )
    # What the admin saw is what is accepted: a server that changed again since is refused. A
    # pending definition whose own digest is not the one shown (a row rewritten since) fails the
    # seal check above, which is over the digest recomputed from the definition the row holds.
    if pin.pending_digest != digest:
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


def server_accept(*, server: str, digests: dict[str, str]) -> list[str]:
    """Accept, for each tool of `server` named in `digests`, the pending definition with that
    digest ("" for gone) as the operator's command (audited as "system"), all or none; the
    tools accepted, by name. Each is checked as the page's Accept is (`pin_check_accept`)."""
    with transaction.atomic():
        pins = [
            pin_check_accept(admin=None, server=server, tool=tool, digest=digest)
            for tool, digest in sorted(digests.items())
        ]
        for pin in pins:
            pin_do_accept(pin=pin, admin=None)
    return [pin.tool for pin in pins]
