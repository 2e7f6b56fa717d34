"""Webhook endpoints a client registers, the deliveries made to them, and each attempt."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models


class WebhookEvent(models.TextChoices):
    RUN_INPUT_REQUIRED = "run.input_required"
    RUN_SUCCEEDED = "run.succeeded"
    RUN_FAILED = "run.failed"
    RUN_CANCELLED = "run.cancelled"
    APPROVAL_DECIDED = "approval.decided"
    # Expired, or cancelled with its run: no decision will come. A framework waiting on its
    # webhook (an external run's) hears of it and answers its model, instead of waiting forever.
    APPROVAL_ENDED = "approval.ended"
    RUN_FOLLOW_UP = "run.follow_up"  # a follow-up message reopened a succeeded run (threads)


class WebhookEndpoint(models.Model):
    """A URL that receives signed POSTs for its owner's runs.

    `secret` is stored as given, not hashed: the server needs it to sign every delivery
    (HMAC), unlike a bearer token it only has to recognise. It is returned once, at creation.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="webhooks")
    url = models.URLField(max_length=2000)
    events = models.JSONField(default=list)
    secret = models.CharField(max_length=100)
    created_at = models.DateTimeField(auto_now_add=True)
    # Deliveries exhausted in a row; a delivered one resets it.
    consecutive_failures = models.PositiveIntegerField(default=0)
    disabled_at = models.DateTimeField(null=True, blank=True)
    disabled_reason = models.CharField(max_length=500, blank=True)
    # The newest desk event when it was registered: it hears only of events after it.
    since_seq = models.BigIntegerField(default=0)


class DispatchCursor(models.Model):
    """How far into the desk's event log deliveries have been made: one row, whose lock also
    keeps two dispatches from turning the same events into deliveries twice."""

    seq = models.BigIntegerField(default=0)


class DeliveryStatus(models.TextChoices):
    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"


class WebhookDelivery(models.Model):
    """One event for one endpoint; `body` is the exact bytes signed and sent (as text)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    endpoint = models.ForeignKey(WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries")
    event_type = models.CharField(max_length=50, choices=WebhookEvent.choices)
    event_seq = models.BigIntegerField(null=True, blank=True)
    body = models.TextField()
    status = models.CharField(max_length=20, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    # Set while a worker is sending: a duplicate task (a redelivered message) finds it and skips.
    leased_until = models.DateTimeField(null=True, blank=True)
    # When the next attempt is due (its task was sent with this countdown); the sweeper
    # re-sends a pending delivery long past it, whose message was lost (Redis down at commit).
    due_at = models.DateTimeField(null=True, blank=True)
    resend_of = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)


class WebhookAttempt(models.Model):
    delivery = models.ForeignKey(WebhookDelivery, on_delete=models.CASCADE, related_name="attempt_rows")
    number = models.PositiveIntegerField()
    at = models.DateTimeField(auto_now_add=True)
    status_code = models.PositiveIntegerField(null=True, blank=True)
    error = models.CharField(max_length=500, blank=True)
    duration_ms = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["number"]
        constraints = [models.UniqueConstraint(fields=["delivery", "number"], name="one_row_per_attempt")]
