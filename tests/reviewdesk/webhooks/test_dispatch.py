"""Deliveries are made from the desk's event log after a cursor (in-process, on the database,
with the real Redis queue for the dispatch task an event's commit sends)."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from reviewdesk.events.services import event_emit, latest_seq
from reviewdesk.webhooks import services
from reviewdesk.webhooks.models import DispatchCursor, WebhookDelivery, WebhookEndpoint
from reviewdesk.webhooks.services import webhook_deliver, webhook_register, webhook_resend, webhooks_dispatch

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def hook(personas, settings):
    settings.DESK_WEBHOOKS_ALLOW_PRIVATE = True
    endpoint, _ = webhook_register(
        owner=personas.carol, url="http://127.0.0.1:9/hook", events=["run.input_required"]
    )
    return endpoint


def test_an_event_becomes_one_delivery_however_many_dispatches_read_it(hook, interrupted_run):
    interrupted_run()
    assert webhooks_dispatch() == 1
    with transaction.atomic():  # the log goes on past the cursor
        event_emit(type="test.unheard", data={}, audience=[])
    assert webhooks_dispatch() == 0  # the cursor moved past it, with the delivery
    assert WebhookDelivery.objects.filter(endpoint=hook).count() == 1
    assert DispatchCursor.objects.get().seq == latest_seq()


def test_an_endpoint_hears_only_of_events_written_after_it_was_registered(
    personas, settings, interrupted_run
):
    settings.DESK_WEBHOOKS_ALLOW_PRIVATE = True
    interrupted_run()  # before any endpoint
    late, _ = webhook_register(
        owner=personas.carol, url="http://127.0.0.1:9/late", events=["run.input_required"]
    )
    assert late.since_seq == latest_seq()
    assert webhooks_dispatch() == 0
    interrupted_run()
    assert webhooks_dispatch() == 1
    assert WebhookDelivery.objects.get(endpoint=late).event_seq > late.since_seq


def test_a_backlog_longer_than_a_page_is_dispatched_whole_and_in_order(hook, interrupted_run, monkeypatch):
    monkeypatch.setattr(services, "DISPATCH_PAGE_SIZE", 2)
    for _ in range(5):
        interrupted_run()
    assert webhooks_dispatch() == 5
    seqs = list(
        WebhookDelivery.objects.filter(endpoint=hook)
        .order_by("created_at")
        .values_list("event_seq", flat=True)
    )
    assert seqs == sorted(seqs) and len(set(seqs)) == 5


def test_an_events_commit_sends_a_dispatch_only_when_its_submitter_has_a_live_webhook(
    personas, settings, interrupted_run, task_queue
):
    settings.DESK_WEBHOOKS_ALLOW_PRIVATE = True
    interrupted_run()
    assert "webhooks.dispatch" not in task_queue.names()  # carol has no webhook yet
    endpoint, _ = webhook_register(
        owner=personas.carol, url="http://127.0.0.1:9/hook", events=["run.succeeded"]
    )
    task_queue.clear()
    interrupted_run()
    assert task_queue.names().count("webhooks.dispatch") == 1
    WebhookEndpoint.objects.filter(pk=endpoint.pk).update(disabled_at="2026-01-01T00:00:00Z")
    task_queue.clear()
    interrupted_run()
    assert "webhooks.dispatch" not in task_queue.names()  # disabled: nothing to tell


def test_with_no_live_endpoint_a_dispatch_moves_past_the_log_without_reading_it(interrupted_run):
    """Beat's sweep dispatches every DESK_SWEEP_SECONDS, whether or not anyone listens: with no
    live endpoint it reads no event (only the log's end) and asks after no run's submitter."""
    for _ in range(3):
        interrupted_run()
    with CaptureQueriesContext(connection) as queries:
        assert webhooks_dispatch() == 0
    sql = [q["sql"] for q in queries.captured_queries]
    events_read = [q for q in sql if "events_deskevent" in q]
    assert len(events_read) == 1 and "LIMIT 1" in events_read[0], events_read
    assert not [q for q in sql if "runs_run" in q]
    assert DispatchCursor.objects.get().seq == latest_seq()


def test_a_webhook_revived_by_a_resend_hears_nothing_written_while_it_was_disabled(
    personas, settings, interrupted_run, receiver
):
    settings.DESK_WEBHOOKS_ALLOW_PRIVATE = True
    endpoint, _ = webhook_register(owner=personas.carol, url=receiver.url, events=["run.input_required"])
    interrupted_run()
    assert webhooks_dispatch() == 1
    WebhookEndpoint.objects.filter(pk=endpoint.pk).update(
        disabled_at=timezone.now(), disabled_reason="failing"
    )
    interrupted_run()  # while disabled; no dispatch has read it yet

    resend = webhook_resend(
        webhook_id=endpoint.id, delivery_id=WebhookDelivery.objects.get().id, owner=personas.carol
    )
    assert webhook_deliver(delivery_id=resend.id) == "delivered"
    assert WebhookEndpoint.objects.get(pk=endpoint.pk).disabled_at is None
    assert webhooks_dispatch() == 0
    interrupted_run()
    assert webhooks_dispatch() == 1


def test_a_dispatch_with_nothing_new_reads_no_endpoint_and_writes_nothing(hook, interrupted_run):
    """Beat's sweep dispatches every DESK_SWEEP_SECONDS: on an idle desk it only reads the
    cursor and the log's end."""
    interrupted_run()
    assert webhooks_dispatch() == 1
    with CaptureQueriesContext(connection) as queries:
        assert webhooks_dispatch() == 0
    sql = [q["sql"] for q in queries.captured_queries]
    assert not [q for q in sql if q.startswith(("UPDATE", "INSERT"))], sql
    assert not [q for q in sql if "webhooks_webhookendpoint" in q], sql
