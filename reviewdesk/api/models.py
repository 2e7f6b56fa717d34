from __future__ import annotations

from django.conf import settings
from django.db import models


class IdempotencyState(models.TextChoices):
    IN_FLIGHT = "in_flight"
    DONE = "done"


class IdempotencyRecord(models.Model):
    """The first response to a POST carrying `Idempotency-Key`, scoped to its client."""

    State = IdempotencyState

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    key = models.CharField(max_length=200)
    request_sha256 = models.CharField(max_length=64)
    state = models.CharField(max_length=20, choices=State.choices, default=State.IN_FLIGHT)
    response_status = models.PositiveSmallIntegerField(null=True)
    response_body = models.JSONField(null=True)
    # The headers a replay must repeat (`idempotency.REPLAYED_HEADERS`): a 201's Location.
    response_headers = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "key"], name="idempotency_key_per_client"),
            models.CheckConstraint(
                condition=models.Q(state__in=IdempotencyState.values), name="idempotency_state_valid"
            ),
        ]
