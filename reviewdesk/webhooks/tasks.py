"""Celery tasks: turning new desk events into deliveries, one attempt of one delivery (the next
is enqueued with a countdown), and beat's sweep for what a lost message left behind."""

from __future__ import annotations

from celery import shared_task

from reviewdesk.webhooks.services import DELIVER_TASK, DISPATCH_TASK, webhook_deliver, webhooks_dispatch
from reviewdesk.webhooks.sweeper import webhooks_sweep

SWEEP_TASK = "webhooks.sweep"


@shared_task(name=DISPATCH_TASK)
def dispatch() -> int:
    return webhooks_dispatch()


@shared_task(name=DELIVER_TASK)
def deliver(delivery_id: str) -> str:
    return webhook_deliver(delivery_id=delivery_id)


@shared_task(name=SWEEP_TASK)
def sweep() -> dict[str, int]:
    return webhooks_sweep()
