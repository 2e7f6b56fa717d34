"""`{% mcp_tools_notice as notices %}`: for an admin, the servers whose tools wait for review
(`selectors.pins_awaiting_admin`); for anyone else, nothing (and no query)."""

from __future__ import annotations

from typing import Any

from django import template

from reviewdesk.accounts.roles import is_admin
from reviewdesk.mcp.selectors import ServerNotice, pins_awaiting_admin

register = template.Library()


@register.simple_tag(takes_context=True)
def mcp_tools_notice(context: dict[str, Any]) -> list[ServerNotice]:
    request = context.get("request")
    if request is None or not is_admin(request.user):
        return []
    return pins_awaiting_admin()
