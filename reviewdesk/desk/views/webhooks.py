"""`/webhooks/`: a user's webhooks: list, register (the secret shown once), delete; one
webhook's recent deliveries with their attempts, and re-send. The same services as the API
(`reviewdesk.webhooks.services`); every webhook is its owner's alone (404 otherwise)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from reviewdesk.api.throttling import ResendThrottle
from reviewdesk.desk.rate_limits import over_limit
from reviewdesk.lib.errors import DeskError, NotFound
from reviewdesk.webhooks.models import WebhookEndpoint, WebhookEvent
from reviewdesk.webhooks.services import (
    webhook_delete,
    webhook_get_for_owner,
    webhook_register,
    webhook_resend,
)

DELIVERIES_SHOWN = 50
URL_MAX = 2000


@never_cache
@login_required
@require_http_methods(["GET", "POST"])
def webhook_list(request: HttpRequest) -> HttpResponse:
    created = errors = None
    if request.method == "POST":
        created, errors = _register(request)
    return render(
        request,
        "desk/webhooks.html",
        {
            "webhooks": WebhookEndpoint.objects.filter(owner=request.user).order_by("-created_at"),
            "events": WebhookEvent.values,
            "created": created,
            "errors": errors,
            "form": request.POST if errors else {},
        },
        status=422 if errors else 200,
    )


def _register(request: HttpRequest) -> tuple[tuple[WebhookEndpoint, str] | None, list[str] | None]:
    url = request.POST.get("url", "").strip()
    events = request.POST.getlist("events")
    errors = []
    try:
        if len(url) > URL_MAX:
            raise ValidationError("too long")
        URLValidator(schemes=["http", "https"])(url)
    except ValidationError:
        errors.append(f"Give an http or https URL of at most {URL_MAX} characters.")
    if not events or set(events) - set(WebhookEvent.values):
        errors.append("Choose at least one event.")
    if errors:
        return None, errors
    try:
        return webhook_register(owner=request.user, url=url, events=events), None
    except DeskError as exc:
        return None, [exc.detail]


@login_required
def webhook_page(request: HttpRequest, webhook_id) -> HttpResponse:
    try:
        endpoint = webhook_get_for_owner(webhook_id=webhook_id, owner=request.user)
    except NotFound:
        raise Http404("no such webhook") from None
    deliveries = endpoint.deliveries.order_by("-created_at").prefetch_related("attempt_rows")
    return render(
        request,
        "desk/webhook.html",
        {"webhook": endpoint, "deliveries": deliveries[:DELIVERIES_SHOWN], "shown": DELIVERIES_SHOWN},
    )


@login_required
@require_http_methods(["POST"])
def webhook_delete_post(request: HttpRequest, webhook_id) -> HttpResponse:
    try:
        webhook_delete(webhook_id=webhook_id, owner=request.user)
    except NotFound:
        raise Http404("no such webhook") from None
    messages.success(request, "Webhook deleted.")
    return redirect("webhooks")


@login_required
@require_http_methods(["POST"])
def webhook_resend_post(request: HttpRequest, webhook_id, delivery_id) -> HttpResponse:
    # Each re-send queues up to DESK_WEBHOOK_MAX_ATTEMPTS POSTs to the owner's URL: the page is
    # held to the API's limit, on the API's counter for this user (counted first, as there).
    refusal = over_limit(request, ResendThrottle(), what="re-sends")
    if refusal:
        messages.error(request, f"Not re-sent: {refusal}")
        return redirect("webhook", webhook_id=webhook_id)
    try:
        webhook_resend(webhook_id=webhook_id, delivery_id=delivery_id, owner=request.user)
    except NotFound:
        raise Http404("no such delivery") from None
    messages.success(request, "Delivery queued again.")
    return redirect("webhook", webhook_id=webhook_id)
