"""The webhooks' dispatch against writers that race it, on two real PostgreSQL connections
(SQLite serialises every writing transaction by itself): a webhook deleted while a dispatch
holds it, and one registered while an event waits to commit."""

from __future__ import annotations

import pytest
from django.db import connection  # noqa: F401 - read by the skipif condition
from django.utils import timezone

from reviewdesk.events.models import DeskEvent
from reviewdesk.events.services import event_emit
from reviewdesk.webhooks import services
from reviewdesk.webhooks.models import WebhookDelivery, WebhookEndpoint
from reviewdesk.webhooks.services import webhook_delete, webhook_register, webhooks_dispatch
from tests.reviewdesk.lib.test_writers_lock import Holder, waits_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif("connection.vendor != 'postgresql'", reason="SQLite serialises every writer"),
]


def register(owner):
    endpoint, _ = webhook_register(owner=owner, url="http://127.0.0.1:9/hook", events=["run.input_required"])
    return endpoint


def test_a_webhook_deleted_while_a_dispatch_holds_it_goes_with_the_deliveries_it_made(
    personas, settings, interrupted_run
):
    """The delete waits for the dispatch's commit and then takes its deliveries with it, where
    gathering them first and waiting at the endpoint's own row broke the foreign key (a 500)."""
    settings.DESK_WEBHOOKS_ALLOW_PRIVATE = True
    hook = register(personas.carol)
    run, _ = interrupted_run()
    event = DeskEvent.objects.filter(run=run, type="run.updated", data__status="input_required").get()

    dispatching = Holder(lambda: services._deliveries_for(event))  # locks the endpoint, as a dispatch does
    dispatching.start()
    waits_for(dispatching, lambda: webhook_delete(webhook_id=hook.id, owner=personas.carol))

    assert dispatching.result and not WebhookEndpoint.objects.filter(pk=hook.pk).exists()
    assert not WebhookDelivery.objects.exists()


def test_an_endpoint_registered_while_an_event_waits_to_commit_does_not_hear_of_it(
    personas, settings, interrupted_run
):
    """Its `since_seq` is read under the writers' lock: an event inserted and not yet committed
    is waited for and counted before it, as the event's writer never saw the endpoint."""
    settings.DESK_WEBHOOKS_ALLOW_PRIVATE = True
    run, _ = interrupted_run()
    writing = Holder(lambda: event_emit(type="run.updated", data={"status": "input_required"}, run_id=run.id))
    writing.start()
    registered = waits_for(writing, lambda: register(personas.carol))

    assert registered.result.since_seq >= writing.result.id
    assert webhooks_dispatch() == 0


def test_a_dispatch_waits_for_one_in_flight_and_makes_none_of_its_deliveries_again(
    personas, settings, interrupted_run
):
    """The cursor's row lock serialises dispatches: a second one waits for the first's commit
    and starts after the cursor it moved, where reading it unlocked made each delivery twice."""
    settings.DESK_WEBHOOKS_ALLOW_PRIVATE = True
    hook = register(personas.carol)
    assert webhooks_dispatch() == 0  # the cursor's row exists, as on any desk that has dispatched
    interrupted_run()
    first = Holder(webhooks_dispatch)
    first.start()
    second = waits_for(first, webhooks_dispatch)

    assert (first.result, second.result) == (1, 0)
    assert WebhookDelivery.objects.filter(endpoint=hook).count() == 1


def test_a_webhook_revived_while_an_event_waits_to_commit_does_not_hear_of_it(
    personas, settings, interrupted_run
):
    """Revived, it starts after the log's end read under the writers' lock, as a registration."""
    settings.DESK_WEBHOOKS_ALLOW_PRIVATE = True
    hook = register(personas.carol)
    WebhookEndpoint.objects.filter(pk=hook.pk).update(disabled_at=timezone.now())
    run, _ = interrupted_run()
    writing = Holder(lambda: event_emit(type="run.updated", data={"status": "input_required"}, run_id=run.id))
    writing.start()
    waits_for(writing, lambda: services._count_success(hook))

    assert WebhookEndpoint.objects.get(pk=hook.pk).since_seq >= writing.result.id
    assert webhooks_dispatch() == 0
