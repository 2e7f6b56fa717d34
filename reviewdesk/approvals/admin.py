from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from reviewdesk.approvals.grants.access import grants_with_uses
from reviewdesk.approvals.models import ApprovalRequest, Decision, Grant
from reviewdesk.lib.admin import ReadOnlyAdmin


@admin.register(ApprovalRequest)
class ApprovalRequestAdmin(ReadOnlyAdmin):
    list_display = ("id", "tool", "status", "run", "expires_at", "created_at")
    list_filter = ("status", "tool")
    list_select_related = ("run",)


@admin.register(Decision)
class DecisionAdmin(ReadOnlyAdmin):
    list_display = ("id", "verdict", "reviewer", "decided_at", "consumed_at", "key_id")
    list_filter = ("verdict",)
    list_select_related = ("reviewer",)


@admin.register(Grant)
class GrantAdmin(ReadOnlyAdmin):
    """Read-only: grants are made with an approve and revoked on /grants/ (approvals.grants.create)."""

    list_display = ("id", "tool", "scope", "uses", "max_uses", "expires_at", "granted_by", "revoked_at")
    list_filter = ("scope", "tool")
    list_select_related = ("granted_by",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Grant]:
        return grants_with_uses(super().get_queryset(request))  # `uses` counts its use rows
