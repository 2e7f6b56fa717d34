"""Standing grants over the API: list them (paged), revoke one. Grants are made with an
approve (`grant` on POST /api/v1/approvals/{id}/decision); see approvals.grants (create, use, access)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.response import Response

from reviewdesk.api import paging
from reviewdesk.api import schema as doc
from reviewdesk.api.filters import GrantFilters, read_filters
from reviewdesk.api.idempotency import idempotent
from reviewdesk.api.permissions import CanRead, CanReview
from reviewdesk.api.representations import grant_data
from reviewdesk.api.views.base import DeskAPIView
from reviewdesk.approvals.grants.access import (
    grant_filter_status,
    grant_revoke,
    grants_visible_to,
)


class GrantListView(DeskAPIView):
    permission_classes = [CanRead]

    @extend_schema(
        operation_id="grants_list",
        summary="List standing grants, newest first",
        description=(
            "Scope: any. Admins see every grant; a reviewer the grants they made and those made on "
            "runs they may see (a grant carries its call's arguments); anyone else none. Paged."
        ),
        parameters=[GrantFilters],
        responses={200: doc.GrantPage, **doc.READ_PROBLEMS},
        extensions=doc.scopes(),
    )
    def get(self, request):
        query = read_filters(request, GrantFilters)
        grants = paging.time_filters(query, grants_visible_to(request.user))
        if status := query.get("status"):
            grants = grant_filter_status(grants, status)
        if tool := query.get("tool"):
            grants = grants.filter(tool=tool)
        if scope := query.get("scope"):
            grants = grants.filter(scope=scope)
        if run_id := query.get("run"):
            grants = grants.filter(run_id=run_id)
        return paging.keyset_page(request, grants, paging.each(grant_data))


class GrantRevokeView(DeskAPIView):
    permission_classes = [CanReview]

    @extend_schema(
        operation_id="grants_revoke",
        summary="Revoke a standing grant, at once",
        description=(
            "Scope: review. Its owner or an admin; 403 otherwise, 404 when not visible, "
            "409 `revoked` when already revoked. The next call it would have allowed asks a reviewer."
        ),
        request=None,
        parameters=[doc.IDEMPOTENCY_KEY],
        responses={200: doc.GrantOutSerializer, **doc.WRITE_PROBLEMS},
        extensions=doc.scopes("review"),
    )
    def post(self, request, grant_id):
        return idempotent(
            request, lambda: Response(grant_data(grant_revoke(grant_id=grant_id, user=request.user)))
        )
