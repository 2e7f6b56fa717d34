"""Thin API views: parse, fetch by id, call one service, render."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from reviewdesk.api.idempotency import idempotent
from reviewdesk.api.permissions import CanRead, CanReview, CanSubmit
from reviewdesk.api.representations import approval_data, decision_data, run_detail, run_summary
from reviewdesk.api.serializers import DecisionSerializer, RunSubmitSerializer
from reviewdesk.approvals.models import ApprovalStatus
from reviewdesk.approvals.selectors import approval_get_for_reviewer, approvals_visible_to
from reviewdesk.approvals.services import approval_decide
from reviewdesk.errors import Invalid
from reviewdesk.events.models import DeskEvent
from reviewdesk.runs.models import RunStatus
from reviewdesk.runs.selectors import run_get_for_user, runs_visible_to
from reviewdesk.runs.services import run_submit

LIST_LIMIT = 100


def _status_filter(request, choices) -> str | None:
    value = request.query_params.get("status")
    if value is not None and value not in choices:
        raise Invalid(f"status must be one of {', '.join(choices)}")
    return value


class RunListCreateView(APIView):
    def get_permissions(self):
        return [CanSubmit()] if self.request.method == "POST" else [CanRead()]

    @extend_schema(parameters=[OpenApiParameter("status", str)], responses={200: dict})
    def get(self, request):
        runs = runs_visible_to(request.user)
        status = _status_filter(request, RunStatus.values)
        if status:
            runs = runs.filter(status=status)
        return Response({"results": [run_summary(r) for r in runs[:LIST_LIMIT]]})

    @extend_schema(request=RunSubmitSerializer, responses={201: dict})
    def post(self, request):
        def submit() -> Response:
            serializer = RunSubmitSerializer(data=request.data)
            serializer.is_valid(raise_exception=True)
            run = run_submit(submitter=request.user, **serializer.validated_data)
            return Response(run_detail(run), status=201, headers={"Location": f"/api/v1/runs/{run.id}"})

        return idempotent(request, submit)


class RunDetailView(APIView):
    permission_classes = [CanRead]

    @extend_schema(responses={200: dict})
    def get(self, request, run_id):
        return Response(run_detail(run_get_for_user(run_id=run_id, user=request.user)))


class RunEventsView(APIView):
    permission_classes = [CanRead]

    @extend_schema(parameters=[OpenApiParameter("after", int)], responses={200: dict})
    def get(self, request, run_id):
        run = run_get_for_user(run_id=run_id, user=request.user)
        try:
            after = int(request.query_params.get("after", 0))
        except ValueError:
            raise Invalid("after must be an integer sequence number") from None
        events = DeskEvent.objects.filter(run=run, id__gt=after).order_by("id")[:500]
        return Response({"results": [e.as_message() for e in events]})


class ApprovalListView(APIView):
    permission_classes = [CanRead]

    @extend_schema(parameters=[OpenApiParameter("status", str)], responses={200: dict})
    def get(self, request):
        approvals = approvals_visible_to(request.user)
        status = _status_filter(request, ApprovalStatus.values)
        if status:
            approvals = approvals.filter(status=status)
        return Response(
            {"results": [approval_data(a) for a in approvals.order_by("-created_at")[:LIST_LIMIT]]}
        )


class ApprovalDetailView(APIView):
    permission_classes = [CanRead]

    @extend_schema(responses={200: dict})
    def get(self, request, approval_id):
        return Response(approval_data(approval_get_for_reviewer(approval_id=approval_id, user=request.user)))


class ApprovalDecisionView(APIView):
    permission_classes = [CanReview]

    @extend_schema(request=DecisionSerializer, responses={201: dict})
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
                arguments=data.get("arguments"),
                checkpoint_id=str(data["checkpoint_id"]),
            )
            return Response(decision_data(decision), status=201)

        return idempotent(request, decide)
