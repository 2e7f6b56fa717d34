"""`POST /api/v1/runs/{id}/messages`: a follow-up message on a succeeded run (threads)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework.response import Response

from reviewdesk.api import schema as doc
from reviewdesk.api.idempotency import idempotent
from reviewdesk.api.permissions import CanSubmit
from reviewdesk.api.representations import run_detail
from reviewdesk.api.serializers import StrictCharField, StrictSerializer
from reviewdesk.api.views.base import DeskAPIView
from reviewdesk.api.views.runs import runs_with_details
from reviewdesk.runs.models import Run
from reviewdesk.runs.threads import run_follow_up


class FollowUpSerializer(StrictSerializer):
    input = StrictCharField(max_length=100_000)  # as a submit's: a number is no message


class RunMessagesView(DeskAPIView):
    permission_classes = [CanSubmit]

    @extend_schema(
        operation_id="runs_follow_up",
        summary="Post a follow-up message on a succeeded run: it runs again as the thread's next turn",
        description=(
            "Scope: submit, and only the run's submitter (403 otherwise; 404 when the run is not "
            "theirs to see). The message is appended to the run's conversation and the run is queued "
            "from its last checkpoint, in a new attempt; it goes `queued` → `running` → … again, and "
            "its `run.updated` event carries `follow_up` (webhooks: `run.follow_up`). 409 `active` "
            "while the run is queued, running or waiting for input; 409 `not_succeeded` for a failed "
            "or cancelled run (retry it first). Idempotency-Key honoured."
        ),
        request=FollowUpSerializer,
        parameters=[doc.IDEMPOTENCY_KEY],
        responses={201: doc.RunOutSerializer, **doc.WRITE_PROBLEMS, 429: doc.problem_response(429)},
        examples=[OpenApiExample("a follow-up", request_only=True, value={"input": "Now tell Bob too."})],
        extensions=doc.scopes("submit"),
    )
    def post(self, request, run_id):
        def follow_up() -> Response:
            serializer = FollowUpSerializer(data=request.data)
            serializer.is_valid(raise_exception=True)
            posted = run_follow_up(run_id=run_id, user=request.user, input=serializer.validated_data["input"])
            run = runs_with_details(Run.objects.filter(pk=posted.run_id)).get()
            return Response(
                run_detail(run, viewer=request.user),
                status=201,
                headers={"Location": f"/api/v1/runs/{run.id}"},
            )

        return idempotent(request, follow_up)
