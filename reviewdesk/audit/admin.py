from django.contrib import admin

from reviewdesk.audit.models import AuditEvent
from reviewdesk.lib.admin import ReadOnlyAdmin


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ("id", "at", "actor_name", "action", "subject_type", "subject_id")
    list_filter = ("action", "subject_type")
    search_fields = ("subject_id", "actor_name")
