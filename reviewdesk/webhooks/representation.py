"""How webhooks and their deliveries look in the API. The secret never appears here."""

from __future__ import annotations

from typing import Any

from reviewdesk.lib.times import rfc3339_sortable
from reviewdesk.webhooks.models import WebhookDelivery, WebhookEndpoint


def webhook_data(endpoint: WebhookEndpoint) -> dict[str, Any]:
    return {
        "id": str(endpoint.id),
        "url": endpoint.url,
        "events": endpoint.events,
        "created_at": rfc3339_sortable(endpoint.created_at),
        "consecutive_failures": endpoint.consecutive_failures,
        "disabled_at": rfc3339_sortable(endpoint.disabled_at),
        "disabled_reason": endpoint.disabled_reason or None,
    }


def delivery_data(delivery: WebhookDelivery) -> dict[str, Any]:
    return {
        "id": str(delivery.id),
        "webhook": str(delivery.endpoint_id),
        "event_type": delivery.event_type,
        "seq": delivery.event_seq,
        "status": delivery.status,
        "resend_of": str(delivery.resend_of_id) if delivery.resend_of_id else None,
        "created_at": rfc3339_sortable(delivery.created_at),
        "finished_at": rfc3339_sortable(delivery.finished_at),
        "attempts": [
            {
                "number": attempt.number,
                "at": rfc3339_sortable(attempt.at),
                "status_code": attempt.status_code,
                "error": attempt.error or None,
                "duration_ms": attempt.duration_ms,
            }
            for attempt in delivery.attempt_rows.all()
        ],
    }
