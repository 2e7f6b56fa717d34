"""Thin API views: parse, fetch by id, call one service, render.

Every list pages with a cursor (`paging`); every error is problem+json (`errors`);
what each operation answers is declared for the OpenAPI document (`schema`).
"""

from __future__ import annotations

from django.conf import settings
from django.db.models import Prefetch
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.utils import extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from reviewdesk.accounts.models import ApiToken
from reviewdesk.accounts.roles import is_admin
from reviewdesk.api import paging
from reviewdesk.api import schema as doc
from reviewdesk.api.idempotency import idempotent
from reviewdesk.api.parsers import body_too_large
from reviewdesk.api.permissions import CanRead, CanReview, CanSubmit, CanSubmitOrReview
from reviewdesk.api.representations import (
    approval_columns,
    approval_data,
    approval_rows,
    approvals_page_data,
    decision_data,
    grant_data,
    run_detail,
    run_details,
)
from reviewdesk.api.serializers import (
    DecisionSerializer,
    HandoverSerializer,
    RetrySerializer,
    RunSubmitSerializer,
)
from reviewdesk.approvals.access import approval_get_visible, approvals_visible_to
from reviewdesk.approvals.deciding.device import DeviceSignature
from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.approvals.lifecycle.handover import approval_handover
from reviewdesk.approvals.models import ApprovalKind, ApprovalRequest, ApprovalStatus
from reviewdesk.approvals.reads.representation import message_for
from reviewdesk.events.models import DeskEvent
from reviewdesk.lib.numbers import HEADER_DIGITS, whole_number
from reviewdesk.runs.models import Checkpoint, Run, RunStatus
from reviewdesk.runs.selectors import run_get_for_user, runs_visible_to
from reviewdesk.runs.services import run_cancel, run_retry, run_submit


class DeskAPIView(APIView):
    """Refuses a body over DESK_MAX_BODY_BYTES by its Content-Length, before reading it."""

    def initial(self, request, *args, **kwargs):
        length = whole_number(request.META.get("CONTENT_LENGTH") or "0", digits=HEADER_DIGITS)
        if length is not None and length > settings.DESK_MAX_BODY_BYTES:
            raise body_too_large(length)
        super().initial(request, *args, **kwargs)


def _with_details(runs):
    return runs.select_related("submitted_by").prefetch_related(
        Prefetch("approvals", queryset=approval_rows(ApprovalRequest.objects.all(), with_run=False)),
        "messages",
        "side_effects",
        "attempts",
        "follow_ups__posted_by",
        Prefetch("checkpoints", queryset=Checkpoint.objects.only("id", "number", "run_id")),
    )


RUN_FILTERS = ("status", "agent", "created_after", "created_before", "limit", "cursor")
APPROVAL_FILTERS = (
    "status",
    "kind",
    "agent",
    "tool",
    "run",
    "created_after",
    "created_before",
    "limit",
    "cursor",
)
EVENT_FILTERS = ("after", "type", "limit")


class RunListCreateView(DeskAPIView):
    def get_permissions(self):
        return [CanSubmit()] if self.request.method == "POST" else [CanRead()]

    @extend_schema(
        operation_id="runs_list",
        summary="List the runs this user may see, newest first",
        description="Scope: any. Paged: follow `next` until it is null.",
        parameters=[
            doc.query("status", str, "only runs in this status", enum=RunStatus.values),
            doc.query("agent", str, "only runs of this agent"),
            doc.CREATED_AFTER,
            doc.CREATED_BEFORE,
            doc.LIMIT,
            doc.CURSOR,
        ],
        responses={200: doc.RunPage, **doc.READ_PROBLEMS},
        extensions=doc.scopes(),
    )
    def get(self, request):
        paging.check_parameters(request, RUN_FILTERS)
        runs = paging.time_filters(request, runs_visible_to(request.user))
        if status := paging.choice_parameter(request, "status", RunStatus.values):
            runs = runs.filter(status=status)
        if agent := paging.text_parameter(request, "agent"):
            runs = runs.filter(agent=agent)
        return paging.keyset_page(
            request, _with_details(runs), lambda page: run_details(page, viewer=request.user)
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
        run = run_get_for_user(run_id=run_id, user=request.user)
        return Response(run_detail(_with_details(Run.objects.filter(pk=run.pk)).get(), viewer=request.user))


class RunEventsView(DeskAPIView):
    permission_classes = [CanRead]

    @extend_schema(
        operation_id="runs_events",
        summary="The run's desk events after a sequence number, oldest first",
        description="Scope: any. Paged: `next` carries `after=` the page's last sequence number.",
        parameters=[doc.AFTER, doc.query("type", str, "only events of this type"), doc.LIMIT],
        responses={200: doc.EventPage, **doc.ONE_PROBLEMS},
        extensions=doc.scopes(),
    )
    def get(self, request, run_id):
        paging.check_parameters(request, EVENT_FILTERS)
        run = run_get_for_user(run_id=run_id, user=request.user)
        events = DeskEvent.objects.filter(run=run)
        if event_type := paging.text_parameter(request, "type"):
            events = events.filter(type=event_type)
        username, admin = request.user.get_username(), is_admin(request.user)
        return paging.sequence_page(
            request, events, lambda event: message_for(event.as_message(), username=username, admin=admin)
        )


class ApprovalListView(DeskAPIView):
    permission_classes = [CanRead]

    @extend_schema(
        operation_id="approvals_list",
        summary="List the approvals this user may see, newest first",
        description="Scope: any. Paged: follow `next` until it is null.",
        parameters=[
            doc.query("status", str, "only approvals in this status", enum=ApprovalStatus.values),
            doc.query("kind", str, "only approvals of this kind", enum=ApprovalKind.values),
            doc.query("agent", str, "only approvals raised by runs of this agent"),
            doc.query("tool", str, "only approvals of calls to this tool"),
            doc.query("run", str, "only approvals of this run (its id)"),
            doc.CREATED_AFTER,
            doc.CREATED_BEFORE,
            doc.LIMIT,
            doc.CURSOR,
        ],
        responses={200: doc.ApprovalPage, **doc.READ_PROBLEMS},
        extensions=doc.scopes(),
    )
    def get(self, request):
        paging.check_parameters(request, APPROVAL_FILTERS)
        status = paging.choice_parameter(request, "status", ApprovalStatus.values)
        # The status narrows the visibility check's read too (pending is a small slice of history).
        lookups = {"status": status} if status else {}
        visible = approvals_visible_to(request.user, related=False, **lookups)
        approvals = paging.time_filters(request, visible)
        if kind := paging.choice_parameter(request, "kind", ApprovalKind.values):
            approvals = approvals.filter(kind=kind)
        if agent := paging.text_parameter(request, "agent"):
            approvals = approvals.filter(run__agent=agent)
        if tool := paging.text_parameter(request, "tool"):
            approvals = approvals.filter(tool=tool)
        if run_id := paging.uuid_parameter(request, "run"):
            approvals = approvals.filter(run_id=run_id)
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


@csrf_exempt  # it changes nothing; without this a POST got Django's HTML 403 CSRF page
def api_not_found(request, *args, **kwargs):
    """Unknown API paths and malformed ids answer in problem+json, like every other API error."""

    return JsonResponse(
        {
            "type": "about:blank",
            "title": "Not found",
            "status": 404,
            "detail": f"no such endpoint: {request.path}",
            "code": "not_found",
        },
        status=404,
        content_type="application/problem+json",
    )
