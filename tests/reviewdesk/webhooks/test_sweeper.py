"""Beat's webhook sweep: an event whose dispatch task was lost is dispatched, and a delivery
whose task was lost (the broker flushed or down at commit) is sent again, through the real
Redis queue, by a real Celery worker, to a real receiver."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from reviewdesk.runs.execution import run_execute
from reviewdesk.runs.services import run_submit
from reviewdesk.webhooks.models import DeliveryStatus, WebhookDelivery
from reviewdesk.webhooks.services import webhook_register
from reviewdesk.webhooks.sweeper import webhooks_sweep
from tests.conftest import SEND_EMAIL_SCRIPT
from tests.reviewdesk.webhooks.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_delivery_whose_task_was_lost_is_sent_again_by_the_sweeper(
    personas, receiver, task_queue, settings, request
):
    settings.DESK_WEBHOOKS_ALLOW_PRIVATE = True
    endpoint, secret = webhook_register(owner=personas.carol, url=receiver.url, events=["run.input_required"])
    run = run_submit(
        submitter=personas.carol,
        agent="demo",
        input="Tell Ada.",
        model={"provider": "scripted", "script": SEND_EMAIL_SCRIPT},
    )
    task_queue.clear()
    run_execute(run_id=run.id, worker="in-process")
    assert task_queue.names() == ["webhooks.dispatch"]  # sent as the run's input_required committed
    task_queue.clear()  # lost: what a flushed or unreachable broker leaves behind
    assert not WebhookDelivery.objects.filter(endpoint=endpoint).exists()

    assert webhooks_sweep() == {"dispatched": 1, "resent": 0}  # the event waited after the cursor
    (delivery,) = WebhookDelivery.objects.filter(endpoint=endpoint)
    assert task_queue.names() == ["webhooks.deliver"]
    task_queue.clear()  # its task lost too
    assert webhooks_sweep() == {"dispatched": 0, "resent": 0}  # not overdue yet: it may be on its way
    WebhookDelivery.objects.filter(pk=delivery.pk).update(due_at=timezone.now() - timedelta(seconds=121))
    assert webhooks_sweep() == {"dispatched": 0, "resent": 1}
    assert task_queue.length() == 1
    assert webhooks_sweep() == {"dispatched": 0, "resent": 0}  # touched: the next sweep waits its turn

    request.getfixturevalue("celery_worker")  # a worker consumes the re-sent task
    (received,) = receiver.wait_for(1)
    assert receiver.verified(received, secret)
    assert received.headers["Desk-Delivery"] == str(delivery.id)
    # The worker records the outcome once the receiver has answered: wait for it to settle.
    delivery = wait_for(
        lambda: WebhookDelivery.objects.exclude(status=DeliveryStatus.PENDING).filter(pk=delivery.pk).first()
    )
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.DELIVERED, 1)


def test_the_sweeper_leaves_deliveries_that_are_waiting_for_a_retry_held_or_finished(
    personas, settings, task_queue
):
    settings.DESK_WEBHOOKS_ALLOW_PRIVATE = True
    endpoint, _ = webhook_register(owner=personas.carol, url="http://127.0.0.1:9/", events=["run.failed"])
    now = timezone.now()
    old = now - timedelta(seconds=600)

    def row(**fields) -> WebhookDelivery:
        return WebhookDelivery.objects.create(endpoint=endpoint, event_type="run.failed", body="{}", **fields)

    row(due_at=now + timedelta(seconds=60))  # a retry's countdown has not run out
    row(due_at=old, leased_until=now + timedelta(seconds=30))  # a worker is sending it now
    row(due_at=old, status=DeliveryStatus.DELIVERED)
    row(due_at=old, status=DeliveryStatus.FAILED)
    assert webhooks_sweep(now=now) == {"dispatched": 0, "resent": 0}
    lost = row(due_at=old, leased_until=old)  # its worker died mid-send, long ago
    assert webhooks_sweep(now=now) == {"dispatched": 0, "resent": 1}
    lost.refresh_from_db()
    assert lost.due_at == now
