"""Approvals: list, read one, decide, hand over."""

from __future__ import annotations

from typing import Any

from django.db.models import Exists, OuterRef
from drf_spectacular.utils import extend_schema
from rest_framework.response import Response

from reviewdesk.api import paging
from reviewdesk.api import schema as doc
from reviewdesk.api.filters import ApprovalFilters, read_filters
from reviewdesk.api.idempotency import idempotent
from reviewdesk.api.permissions import CanRead, CanReview
from reviewdesk.api.representations import grant_data
from reviewdesk.api.serializers import (
    DecisionSerializer,
    HandoverSerializer,
)
from reviewdesk.api.views.base import DeskAPIView
from reviewdesk.approvals.access import approval_get_visible, approvals_visible_to
from reviewdesk.approvals.deciding.input import DeviceSignature
from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.approvals.lifecycle.handover import approval_handover
from reviewdesk.approvals.models import Decision
from reviewdesk.approvals.reads.representation import (
    approval_columns,
    approval_data,
    approvals_page_data,
    decision_data,
)


class ApprovalListView(DeskAPIView):
    permission_classes = [CanRead]

    @extend_schema(
        operation_id="approvals_list",
        summary="List the approvals this user may see, newest first",
        description="Scope: any. Paged: follow `next` until it is null.",
        parameters=[ApprovalFilters],
        responses={200: doc.ApprovalPage, **doc.READ_PROBLEMS},
        extensions=doc.scopes(),
    )
    def get(self, request):
        query = read_filters(request, ApprovalFilters)
        # The status narrows the visibility check's read too (pending is a small slice of history).
        statuses = query.get("status", [])
        lookups: dict[str, Any] = (
            {"status": statuses[0]} if len(statuses) == 1 else {"status__in": statuses} if statuses else {}
        )
        visible = approvals_visible_to(request.user, related=False, **lookups)
        approvals = paging.time_filters(query, visible)
        if kind := query.get("kind"):
            approvals = approvals.filter(kind=kind)
        if agent := query.get("agent"):
            approvals = approvals.filter(run__agent=agent)
        if tool := query.get("tool"):
            approvals = approvals.filter(tool=tool)
        if run_id := query.get("run"):
            approvals = approvals.filter(run_id=run_id)
        if "consumed" in query:
            used = Decision.objects.filter(request=OuterRef("pk"), consumed_at__isnull=False)
            approvals = (
                approvals.filter(Exists(used)) if query["consumed"] else approvals.exclude(Exists(used))
            )
        return paging.keyset_page(request, approval_columns(approvals), approvals_page_data)


class ApprovalDetailView(DeskAPIView):
    permission_classes = [CanRead]

    @extend_schema(
        operation_id="approvals_get",
        summary="One approval",
        description="Scope: any. 404 when missing or not this user's to see.",
        responses={200: doc.ApprovalOutSerializer, **doc.ONE_PROBLEMS},
        extensions=doc.scopes(),
    )
    def get(self, request, approval_id):
        return Response(approval_data(approval_get_visible(approval_id=approval_id, user=request.user)))


class ApprovalDecisionView(DeskAPIView):
    permission_classes = [CanReview]

    @extend_schema(
        operation_id="approvals_decide",
        summary="Decide an approval: a signed decision",
        description=(
            "Scope: review. 403 not allowed, 409 decided / stale / cancelled, 410 expired, 422 invalid. "
            "Unknown fields are refused. Idempotency-Key honoured. With an approve, an optional `grant` "
            '{"match": "exact" or {field: {operator: value}}, "scope": "run"|"agent"|"global", '
            '"expires_at", "max_uses"} allows matching calls ahead of time (403 scope global by a '
            "non-admin; 422 a bad grant, `not_grantable` for a tool that never is)."
        ),
        request=DecisionSerializer,
        parameters=[doc.IDEMPOTENCY_KEY],
        responses={
            201: doc.DecisionOutSerializer,
            **doc.WRITE_PROBLEMS,
            410: doc.problem_response(410),
            429: doc.problem_response(429),
        },
        examples=[doc.DECISION_EXAMPLE, doc.GRANT_DECISION_EXAMPLE, doc.PROBLEM_EXAMPLE],
        extensions=doc.scopes("review"),
    )
    def post(self, request, approval_id):
        def decide() -> Response:
            serializer = DecisionSerializer(data=request.data)
            serializer.is_valid(raise_exception=True)
            data = serializer.validated_data
            decision = approval_decide(
                approval_id=approval_id,
                reviewer=request.user,
                verdict=data["verdict"],
                reason=data["reason"],
                note=data["note"],
                external_ref=data["external_ref"],
                arguments=data.get("arguments"),
                checkpoint_id=str(data["checkpoint_id"]),
                device=(
                    DeviceSignature(
                        payload=data["payload"], signature=data["signature"], key_id=data["key_id"]
                    )
                    if "signature" in data
                    else None
                ),
                answer=data.get("answer"),
                grant=data.get("grant"),
            )
            # Made with this decision, or none asked for (no read for the reverse relation).
            grant = getattr(decision, "grant", None) if data.get("grant") is not None else None
            return Response(
                {**decision_data(decision), "grant": grant_data(grant) if grant else None}, status=201
            )

        return idempotent(request, decide)


class ApprovalHandoverView(DeskAPIView):
    permission_classes = [CanReview]

    @extend_schema(
        operation_id="approvals_handover",
        summary="Hand a pending approval to a colleague or a group, with a note",
        description=(
            'Scope: review. `to` is a username or "group:NAME". 403 when the caller may not decide '
            "this approval, 409 decided / cancelled, 410 expired, 422 when the target may not decide "
            "it (the run's submitter, not a reviewer, an empty group, a reviewer who already voted). "
            "Audited and pushed live. Idempotency-Key honoured."
        ),
        request=HandoverSerializer,
        parameters=[doc.IDEMPOTENCY_KEY],
        responses={200: doc.ApprovalOutSerializer, **doc.WRITE_PROBLEMS, 410: doc.problem_response(410)},
        examples=[doc.HANDOVER_EXAMPLE],
        extensions=doc.scopes("review"),
    )
    def post(self, request, approval_id):
        def hand_over() -> Response:
            serializer = HandoverSerializer(data=request.data)
            serializer.is_valid(raise_exception=True)
            data = serializer.validated_data
            # The caller may no longer see it once handed over: answer with what the service returned.
            approval = approval_handover(
                approval_id=approval_id, by=request.user, to=data["to"], note=data["note"]
            )
            return Response(approval_data(approval))

        return idempotent(request, hand_over)
