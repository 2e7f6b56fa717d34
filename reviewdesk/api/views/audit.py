"""The audit trail over the API: admins, with a token holding the `audit` scope, read it in
chain order (oldest first), paged by the row's sequence number (`after=`), filtered by actor,
action, subject and time. The same rows as `/audit/`; `manage.py verify_audit` checks them."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers

from reviewdesk.accounts.roles import is_admin
from reviewdesk.api import paging
from reviewdesk.api import schema as doc
from reviewdesk.api.filters import AuditFilters, read_filters, refuse_unknown
from reviewdesk.api.permissions import token_scope_permission
from reviewdesk.api.views.base import DeskAPIView
from reviewdesk.audit.models import AuditEvent
from reviewdesk.lib.errors import Forbidden


class AuditRowSerializer(serializers.Serializer):
    seq = serializers.IntegerField(help_text="the row's place in the chain; `after=` takes it")
    at = serializers.DateTimeField()
    actor = serializers.CharField(help_text='the username, or "system"')
    action = serializers.CharField(help_text="decision.recorded, run.cancelled, token.revoked, …")
    subject_type = serializers.CharField()
    subject_id = serializers.CharField()
    data = doc.ANY_JSON()
    prev_hash = serializers.CharField()
    hash = serializers.CharField(help_text="HMAC-SHA256 under the audit key (see docs/audit.md)")


def audit_row(row: AuditEvent) -> dict[str, Any]:
    return {
        "seq": row.id,
        "at": row.at.isoformat(),
        "actor": row.actor_name,
        "action": row.action,
        "subject_type": row.subject_type,
        "subject_id": row.subject_id,
        "data": row.data,
        "prev_hash": row.prev_hash,
        "hash": row.hash,
    }


class AuditListView(DeskAPIView):
    permission_classes = [token_scope_permission("audit")]

    @extend_schema(
        operation_id="audit_list",
        summary="The audit trail in chain order, oldest first",
        description=(
            "Scope: audit, and the user must be an admin (403 `forbidden` otherwise). "
            "Paged: `next` carries `after=` the page's last `seq`."
        ),
        parameters=[AuditFilters],
        responses={200: doc.page_of("AuditPage", AuditRowSerializer), **doc.problems(*doc.COMMON, 403)},
        extensions=doc.scopes("audit"),
    )
    def get(self, request):
        refuse_unknown(request, AuditFilters)
        if not is_admin(request.user):
            raise Forbidden("the audit trail is for admins")
        query = read_filters(request, AuditFilters)
        rows = paging.time_filters(query, AuditEvent.objects.all(), field="at")
        for name, field in (
            ("actor", "actor_name"),
            ("action", "action"),
            ("subject_type", "subject_type"),
            ("subject_id", "subject_id"),
        ):
            if value := query.get(name):
                rows = rows.filter(**{field: value})
        return paging.sequence_page(request, rows, audit_row)
