from django.contrib import admin

from reviewdesk.lib.admin import ReadOnlyAdmin
from reviewdesk.runs.models import Attempt, Run, SideEffect


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = ("id", "agent", "status", "submitted_by", "created_at", "updated_at")
    list_filter = ("status", "agent")
    list_select_related = ("submitted_by",)
    search_fields = ("id", "input")


@admin.register(Attempt)
class AttemptAdmin(ReadOnlyAdmin):
    list_display = ("run", "number", "status", "lease_epoch", "worker", "started_at", "ended_at")
    list_filter = ("status",)
    list_select_related = ("run",)


@admin.register(SideEffect)
class SideEffectAdmin(ReadOnlyAdmin):
    list_display = ("idempotency_key", "tool", "status", "created_at")
    list_filter = ("status", "tool")
