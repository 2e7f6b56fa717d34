"""Celery tasks: one attempt of one webhook delivery (the next is enqueued with a countdown),
and beat's sweep for deliveries whose message was lost."""

from __future__ import annotations

from celery import shared_task

from reviewdesk.webhooks.services import DELIVER_TASK, webhook_deliver
from reviewdesk.webhooks.sweeper import webhooks_sweep

SWEEP_TASK = "webhooks.sweep"


@shared_task(name=DELIVER_TASK)
def deliver(delivery_id: str) -> str:
    return webhook_deliver(delivery_id=delivery_id)


@shared_task(name=SWEEP_TASK)
def sweep() -> dict[str, int]:
    return webhooks_sweep()
