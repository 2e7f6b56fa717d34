"""Thin API views: parse, fetch by id, call one service, render."""

from __future__ import annotations

from django.db.models import Prefetch
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from reviewdesk.api.idempotency import idempotent
from reviewdesk.api.permissions import CanRead, CanReview, CanSubmit, CanSubmitOrReview
from reviewdesk.api.representations import approval_data, decision_data, run_detail
from reviewdesk.api.serializers import DecisionSerializer, RetrySerializer, RunSubmitSerializer
from reviewdesk.approvals.models import ApprovalStatus
from reviewdesk.approvals.selectors import approval_get_for_reviewer, approvals_visible_to
from reviewdesk.approvals.services import approval_decide
from reviewdesk.errors import Invalid
from reviewdesk.events.models import DeskEvent
from reviewdesk.runs.models import Checkpoint, Run, RunStatus
from reviewdesk.runs.selectors import run_get_for_user, runs_visible_to
from reviewdesk.runs.services import run_cancel, run_retry, run_submit

LIST_LIMIT = 100


def _with_details(runs):
    return runs.select_related("submitted_by").prefetch_related(
        "approvals__decision__reviewer",
        "messages",
        "side_effects",
        "attempts",
        Prefetch("checkpoints", queryset=Checkpoint.objects.only("id", "number", "run_id")),
    )


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
        return Response({"results": [run_detail(r) for r in _with_details(runs)[:LIST_LIMIT]]})

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
        run = run_get_for_user(run_id=run_id, user=request.user)
        return Response(run_detail(_with_details(Run.objects.filter(pk=run.pk)).get()))


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
                external_ref=data["external_ref"],
                arguments=data.get("arguments"),
                checkpoint_id=str(data["checkpoint_id"]),
            )
            return Response(decision_data(decision), status=201)

        return idempotent(request, decide)


class RunCancelView(APIView):
    permission_classes = [CanSubmitOrReview]

    @extend_schema(request=None, responses={200: dict})
    def post(self, request, run_id):
        return idempotent(request, lambda: Response(run_detail(run_cancel(run_id=run_id, user=request.user))))


class RunRetryView(APIView):
    permission_classes = [CanSubmit]

    @extend_schema(request=RetrySerializer, responses={201: dict})
    def post(self, request, run_id):
        def retry() -> Response:
            serializer = RetrySerializer(data=request.data or {})
            serializer.is_valid(raise_exception=True)
            checkpoint_id = serializer.validated_data.get("checkpoint_id")
            run = run_retry(
                run_id=run_id, user=request.user, checkpoint_id=str(checkpoint_id) if checkpoint_id else None
            )
            return Response(run_detail(run), status=201)

        return idempotent(request, retry)


def api_not_found(request, *args, **kwargs):
    """Unknown API paths and malformed ids answer in problem+json, like every other API error."""
    from django.http import JsonResponse

    return JsonResponse(
        {
            "type": "about:blank",
            "title": "Not found",
            "status": 404,
            "detail": f"no such endpoint: {request.path}",
        },
        status=404,
        content_type="application/problem+json",
    )
