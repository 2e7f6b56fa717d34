"""Webhooks over the API: register, list, see deliveries, re-send. Scope: submit; owner only."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from reviewdesk.api import paging
from reviewdesk.api import schema as doc
from reviewdesk.api.filters import PageOnly, read_filters, refuse_unknown
from reviewdesk.api.idempotency import idempotent
from reviewdesk.api.permissions import CanSubmit
from reviewdesk.api.serializers import StrictSerializer
from reviewdesk.api.views.base import DeskAPIView
from reviewdesk.webhooks.models import DeliveryStatus, WebhookEndpoint, WebhookEvent
from reviewdesk.webhooks.representation import delivery_data, webhook_data
from reviewdesk.webhooks.services import webhook_get_for_owner, webhook_register, webhook_resend


class WebhookCreateSerializer(StrictSerializer):
    url = serializers.URLField(max_length=2000, help_text="http or https; must resolve to public addresses")
    events = serializers.ListField(
        child=serializers.ChoiceField(choices=WebhookEvent.values), min_length=1, max_length=10
    )


class WebhookOutSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    url = serializers.URLField()
    events = serializers.ListField(child=serializers.ChoiceField(choices=WebhookEvent.values))
    created_at = serializers.DateTimeField()
    consecutive_failures = serializers.IntegerField(help_text="deliveries exhausted in a row")
    disabled_at = serializers.DateTimeField(allow_null=True, help_text="set when too many deliveries failed")
    disabled_reason = serializers.CharField(allow_null=True)


class WebhookCreatedSerializer(WebhookOutSerializer):
    secret = serializers.CharField(help_text="shown this once; verify Desk-Signature with it")


class AttemptOutSerializer(serializers.Serializer):
    number = serializers.IntegerField()
    at = serializers.DateTimeField()
    status_code = serializers.IntegerField(allow_null=True)
    error = serializers.CharField(allow_null=True)
    duration_ms = serializers.IntegerField()


class DeliveryOutSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    webhook = serializers.UUIDField()
    event_type = serializers.CharField(help_text="one of the webhook event types")
    seq = serializers.IntegerField(allow_null=True, help_text="the desk event's sequence number")
    status = serializers.ChoiceField(choices=DeliveryStatus.values)
    resend_of = serializers.UUIDField(allow_null=True)
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    attempts = AttemptOutSerializer(many=True)


WebhookPage = doc.page_of("WebhookPage", WebhookOutSerializer)
DeliveryPage = doc.page_of("DeliveryPage", DeliveryOutSerializer)
SIGNATURE_NOTE = (
    "Each delivery is a POST of JSON `{id, type, seq, run, created_at, data}` with the header "
    '`Desk-Signature: t=UNIX,v1=HEX`, HEX = HMAC-SHA256(secret, `"{t}." + body`). Failed '
    "deliveries are retried with exponential backoff; an endpoint whose deliveries fail "
    "DESK_WEBHOOK_DISABLE_AFTER times in a row is disabled (`disabled_at`, `disabled_reason`)."
)


class WebhookListCreateView(DeskAPIView):
    permission_classes = [CanSubmit]

    @extend_schema(
        operation_id="webhooks_list",
        summary="List this user's webhooks, newest first",
        description="Scope: submit. Paged: follow `next` until it is null. The secret is never listed.",
        parameters=[PageOnly],
        responses={200: WebhookPage, **doc.READ_PROBLEMS, 403: doc.problem_response(403)},
        extensions=doc.scopes("submit"),
    )
    def get(self, request):
        read_filters(request, PageOnly)
        return paging.keyset_page(
            request, WebhookEndpoint.objects.filter(owner=request.user), paging.each(webhook_data)
        )

    @extend_schema(
        operation_id="webhooks_create",
        summary="Register a webhook for this user's runs",
        description=(
            "Scope: submit. The endpoint receives events of runs this user submitted. The URL must "
            "resolve to public addresses (422 otherwise, unless DESK_WEBHOOKS_ALLOW_PRIVATE). "
            "The response carries the secret, once (a repeat with the same Idempotency-Key replays "
            "that response, to the same client). " + SIGNATURE_NOTE
        ),
        request=WebhookCreateSerializer,
        parameters=[doc.IDEMPOTENCY_KEY],
        responses={201: WebhookCreatedSerializer, **doc.WRITE_PROBLEMS},
        examples=[
            OpenApiExample(
                "run outcomes",
                request_only=True,
                value={"url": "https://hooks.example.com/desk", "events": ["run.succeeded", "run.failed"]},
            )
        ],
        extensions=doc.scopes("submit"),
    )
    def post(self, request):
        def register() -> Response:
            serializer = WebhookCreateSerializer(data=request.data)
            serializer.is_valid(raise_exception=True)
            endpoint, secret = webhook_register(owner=request.user, **serializer.validated_data)
            return Response(
                {**webhook_data(endpoint), "secret": secret},
                status=201,
                headers={"Location": f"/api/v1/webhooks/{endpoint.id}/deliveries"},
            )

        # A client retrying after a lost answer must not register a second receiver.
        return idempotent(request, register)


class WebhookDeliveriesView(DeskAPIView):
    permission_classes = [CanSubmit]

    @extend_schema(
        operation_id="webhooks_deliveries",
        summary="The webhook's deliveries, newest first, each with its attempts",
        description="Scope: submit (the webhook's owner). 404 when missing or someone else's.",
        parameters=[PageOnly],
        responses={200: DeliveryPage, **doc.ONE_PROBLEMS, 403: doc.problem_response(403)},
        extensions=doc.scopes("submit"),
    )
    def get(self, request, webhook_id):
        refuse_unknown(request, PageOnly)
        endpoint = webhook_get_for_owner(webhook_id=webhook_id, owner=request.user)
        read_filters(request, PageOnly)  # judged once the caller may read the list: 404 first
        deliveries = endpoint.deliveries.prefetch_related("attempt_rows")
        return paging.keyset_page(request, deliveries, paging.each(delivery_data))


class WebhookResendView(DeskAPIView):
    permission_classes = [CanSubmit]

    @extend_schema(
        operation_id="webhooks_resend",
        summary="Send a delivery's body again, as a new delivery",
        description=(
            "Scope: submit (the webhook's owner). Allowed on a disabled webhook: a successful "
            "re-send enables it again. Idempotency-Key honoured. Limited per token "
            "(DESK_RATE_RESEND, default 30/min): over it, 429 `throttled` with Retry-After."
        ),
        request=None,
        parameters=[doc.IDEMPOTENCY_KEY],
        responses={202: DeliveryOutSerializer, **doc.WRITE_PROBLEMS, 429: doc.problem_response(429)},
        extensions=doc.scopes("submit"),
    )
    def post(self, request, webhook_id, delivery_id):
        def resend() -> Response:
            delivery = webhook_resend(webhook_id=webhook_id, delivery_id=delivery_id, owner=request.user)
            return Response(delivery_data(delivery), status=202)

        # A repeated click or a client's retry under one key sends the body once, not twice.
        return idempotent(request, resend)
