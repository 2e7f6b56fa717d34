from django.contrib import admin

from reviewdesk.lib.admin import ReadOnlyAdmin
from reviewdesk.mcp.models import ToolPin


@admin.register(ToolPin)
class ToolPinAdmin(ReadOnlyAdmin):
    """Read-only: pins change through the worker's reconcile and an admin's acceptance (/mcp/)."""

    list_display = ("server", "tool", "digest", "accepted_by_name", "accepted_at", "pending_state")
    list_filter = ("server", "pending_state")
    list_select_related = ("accepted_by",)
