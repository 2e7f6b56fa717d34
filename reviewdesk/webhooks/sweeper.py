"""Beat's safety net for webhooks: dispatch the events no dispatch has read yet, and re-send
deliveries whose task never reached the broker.

A dispatch task is sent as an event commits, and a delivery's task as its row commits. When
Redis is down at that moment (or the message is lost later) the events wait after the cursor,
and the delivery row stays `pending` with no task to send it. Like `runs.sweeper` for runs, the database is the source of truth: a
pending delivery whose next attempt was due more than DESK_REQUEUE_AFTER_SECONDS ago, and that
no worker holds (no live `leased_until`), is sent again. A duplicate is harmless:
`webhook_deliver` claims each attempt by compare-and-set.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from reviewdesk.celery import app as celery_app
from reviewdesk.webhooks.models import DeliveryStatus, WebhookDelivery
from reviewdesk.webhooks.services import DELIVER_TASK, webhooks_dispatch

logger = logging.getLogger(__name__)


def webhooks_sweep(*, now: datetime | None = None) -> dict[str, int]:
    """Dispatch what waits after the cursor; re-send the pending deliveries whose message was
    lost. How many deliveries were made, and how many were sent again."""
    try:
        made = webhooks_dispatch()
    except Exception:  # the re-sends below do not depend on it; the next sweep dispatches again
        logger.exception("the sweep's webhook dispatch failed")
        made = 0
    now = now or timezone.now()
    stale = now - timedelta(seconds=settings.DESK_REQUEUE_AFTER_SECONDS)
    lost = list(
        WebhookDelivery.objects.filter(status=DeliveryStatus.PENDING)
        .filter(Q(leased_until__isnull=True) | Q(leased_until__lt=now))
        .filter(Q(due_at__lt=stale) | Q(due_at__isnull=True, created_at__lt=stale))
        .values_list("id", flat=True)[:500]
    )
    resent = 0
    for delivery_id in lost:
        # Touch the row first, so the next sweep waits its turn instead of piling up duplicates.
        WebhookDelivery.objects.filter(pk=delivery_id).update(due_at=now)
        try:
            celery_app.send_task(DELIVER_TASK, args=[str(delivery_id)])
            resent += 1
        except Exception:
            logger.exception("sweeper could not enqueue webhook delivery %s", delivery_id)
    return {"dispatched": made, "resent": resent}
