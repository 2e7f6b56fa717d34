"""Runs: submit, list, read one, its events, cancel, retry."""

from __future__ import annotations

from django.db.models import Prefetch
from drf_spectacular.utils import extend_schema
from rest_framework.response import Response

from reviewdesk.accounts.models import ApiToken
from reviewdesk.accounts.roles import is_admin
from reviewdesk.api import paging
from reviewdesk.api import schema as doc
from reviewdesk.api.filters import RunEventFilters, RunFilters, read_filters, refuse_unknown
from reviewdesk.api.idempotency import idempotent
from reviewdesk.api.permissions import CanRead, CanSubmit, CanSubmitOrReview
from reviewdesk.api.representations import run_detail, run_details
from reviewdesk.api.serializers import (
    RetrySerializer,
    RunSubmitSerializer,
)
from reviewdesk.api.views.base import DeskAPIView
from reviewdesk.approvals.models import ApprovalRequest
from reviewdesk.approvals.reads.representation import approval_rows, message_for
from reviewdesk.events.models import DeskEvent
from reviewdesk.runs.access import run_get_visible, runs_visible_to
from reviewdesk.runs.models import Checkpoint, Run
from reviewdesk.runs.services import run_cancel, run_retry, run_submit


def runs_with_details(runs):
    """`runs` with everything a run's representation shows, in a fixed number of reads."""
    return runs.select_related("submitted_by").prefetch_related(
        Prefetch("approvals", queryset=approval_rows(ApprovalRequest.objects.all(), with_run=False)),
        "messages",
        "side_effects",
        "attempts",
        "follow_ups__posted_by",
        Prefetch("checkpoints", queryset=Checkpoint.objects.only("id", "number", "run_id")),
    )


class RunListCreateView(DeskAPIView):
    def get_permissions(self):
        return [CanSubmit()] if self.request.method == "POST" else [CanRead()]

    @extend_schema(
        operation_id="runs_list",
        summary="List the runs this user may see, newest first",
        description="Scope: any. Paged: follow `next` until it is null.",
        parameters=[RunFilters],
        responses={200: doc.RunPage, **doc.READ_PROBLEMS},
        extensions=doc.scopes(),
    )
    def get(self, request):
        query = read_filters(request, RunFilters)
        runs = paging.time_filters(query, runs_visible_to(request.user))
        if status := query.get("status"):
            runs = runs.filter(status=status)
        if agent := query.get("agent"):
            runs = runs.filter(agent=agent)
        return paging.keyset_page(
            request, runs_with_details(runs), lambda page: run_details(page, viewer=request.user)
        )

    @extend_schema(
        operation_id="runs_submit",
        summary="Submit a run",
        description="Scope: submit. Unknown fields are refused (422 `invalid`). Idempotency-Key honoured.",
        request=RunSubmitSerializer,
        parameters=[doc.IDEMPOTENCY_KEY],
        responses={201: doc.RunOutSerializer, **doc.WRITE_PROBLEMS, 429: doc.problem_response(429)},
        examples=[doc.SUBMIT_EXAMPLE],
        extensions=doc.scopes("submit"),
    )
    def post(self, request):
        def submit() -> Response:
            serializer = RunSubmitSerializer(data=request.data)
            serializer.is_valid(raise_exception=True)
            run = run_submit(submitter=request.user, **serializer.validated_data)
            return Response(
                run_detail(run, viewer=request.user, new=True),
                status=201,
                headers={"Location": f"/api/v1/runs/{run.id}"},
            )

        return idempotent(request, submit)


class RunDetailView(DeskAPIView):
    permission_classes = [CanRead]

    @extend_schema(
        operation_id="runs_get",
        summary="One run, with its approvals, messages, side effects and attempts",
        description="Scope: any. 404 when missing or not this user's to see.",
        responses={200: doc.RunOutSerializer, **doc.ONE_PROBLEMS},
        extensions=doc.scopes(),
    )
    def get(self, request, run_id):
        run = run_get_visible(run_id=run_id, user=request.user)
        return Response(
            run_detail(runs_with_details(Run.objects.filter(pk=run.pk)).get(), viewer=request.user)
        )


class RunEventsView(DeskAPIView):
    permission_classes = [CanRead]

    @extend_schema(
        operation_id="runs_events",
        summary="The run's desk events after a sequence number, oldest first",
        description="Scope: any. Paged: `next` carries `after=` the page's last sequence number.",
        parameters=[RunEventFilters],
        responses={200: doc.EventPage, **doc.ONE_PROBLEMS},
        extensions=doc.scopes(),
    )
    def get(self, request, run_id):
        refuse_unknown(request, RunEventFilters)
        run = run_get_visible(run_id=run_id, user=request.user)
        query = read_filters(request, RunEventFilters)
        events = DeskEvent.objects.filter(run=run)
        if event_type := query.get("type"):
            events = events.filter(type=event_type)
        username, admin = request.user.get_username(), is_admin(request.user)
        return paging.sequence_page(
            request, events, lambda event: message_for(event.as_message(), username=username, admin=admin)
        )


class RunCancelView(DeskAPIView):
    permission_classes = [CanSubmitOrReview]

    @extend_schema(
        operation_id="runs_cancel",
        summary="Cancel a run",
        description="Scope: submit (the submitter) or review (its reviewers). Idempotency-Key honoured.",
        request=None,
        parameters=[doc.IDEMPOTENCY_KEY],
        responses={200: doc.RunOutSerializer, **doc.WRITE_PROBLEMS},
        extensions=doc.scopes("submit", "review"),
    )
    def post(self, request, run_id):
        # A token acts only in its scopes' roles: a submitter's review-scoped token cannot cancel.
        scopes = frozenset(request.auth.scopes) if isinstance(request.auth, ApiToken) else None
        return idempotent(
            request,
            lambda: Response(
                run_detail(run_cancel(run_id=run_id, user=request.user, scopes=scopes), viewer=request.user)
            ),
        )


class RunRetryView(DeskAPIView):
    permission_classes = [CanSubmit]

    @extend_schema(
        operation_id="runs_retry",
        summary="Retry a failed or cancelled run, from its latest or a named checkpoint",
        description="Scope: submit. Idempotency-Key honoured.",
        request=RetrySerializer,
        parameters=[doc.IDEMPOTENCY_KEY],
        responses={201: doc.RunOutSerializer, **doc.WRITE_PROBLEMS},
        extensions=doc.scopes("submit"),
    )
    def post(self, request, run_id):
        def retry() -> Response:
            serializer = RetrySerializer(data=request.data or {})
            serializer.is_valid(raise_exception=True)
            checkpoint_id = serializer.validated_data.get("checkpoint_id")
            run = run_retry(
                run_id=run_id, user=request.user, checkpoint_id=str(checkpoint_id) if checkpoint_id else None
            )
            return Response(run_detail(run, viewer=request.user), status=201)

        return idempotent(request, retry)
