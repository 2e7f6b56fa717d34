from django.contrib import admin

from reviewdesk.approvals.models import ApprovalRequest, Decision
from reviewdesk.runs.admin import ReadOnlyAdmin


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
