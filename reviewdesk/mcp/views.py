"""The admins' review page of MCP tool pins (`/mcp/`) and its Accept button."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from reviewdesk.accounts.roles import is_admin
from reviewdesk.lib.errors import DeskError
from reviewdesk.mcp.selectors import definition_text, pin_rows
from reviewdesk.mcp.services import pin_accept


def _require_admin(request: HttpRequest) -> None:
    if not is_admin(request.user):
        raise PermissionDenied("MCP tool definitions are reviewed by admins")


@login_required
def pins_page(request: HttpRequest) -> HttpResponse:
    """Every server's tools and their pin state; a changed tool's old and new definitions side
    by side, with the line-by-line difference, and an Accept button."""
    _require_admin(request)
    rows = pin_rows()
    servers: dict[str, list] = {}
    for row in rows:
        servers.setdefault(row.pin.server, []).append(
            {
                "row": row,
                "old_text": definition_text(row.pin.definition),
                "new_text": definition_text(row.pin.pending_definition),
            }
        )
    return render(request, "mcp/pins.html", {"servers": servers})


@login_required
@require_POST
def pin_accept_post(request: HttpRequest, server: str, tool: str) -> HttpResponse:
    _require_admin(request)
    try:
        pin_accept(admin=request.user, server=server, tool=tool, digest=request.POST.get("digest", ""))
    except DeskError as exc:
        messages.error(request, f"Not accepted: {exc.detail}")
    else:
        messages.success(
            request, f"Accepted the definition {server} serves now for {tool}: its calls run again."
        )
    return redirect("mcp-pins")
