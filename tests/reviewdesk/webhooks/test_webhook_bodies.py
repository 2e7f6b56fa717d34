"""What a webhook's body carries of an event, as written when the event is (in-process: the
rows, not their sending, which test_webhooks.py covers with a real worker and receiver)."""

from __future__ import annotations

import json

import pytest

from reviewdesk.approvals.handover import approval_handover
from reviewdesk.approvals.services import approval_decide
from reviewdesk.runs.execution import run_execute
from reviewdesk.runs.services import run_submit
from reviewdesk.webhooks.models import WebhookDelivery, WebhookEndpoint
from tests.conftest import SEND_EMAIL_SCRIPT

pytestmark = pytest.mark.django_db


def endpoint_of(user, *events) -> WebhookEndpoint:
    return WebhookEndpoint.objects.create(
        owner=user, url="https://hooks.example.com/x", events=list(events), secret="s"
    )


def test_a_decided_calls_body_leaves_a_hand_overs_note_blank_for_the_submitter(personas):
    """The submitter is not who the note is for (events.builders.approval_for): the desk and the
    run's feeds leave it blank for them, and so does their webhook."""
    endpoint = endpoint_of(personas.carol, "approval.decided")
    run = run_submit(
        submitter=personas.carol,
        agent="demo",
        input="Tell Ada.",
        model={"provider": "scripted", "script": SEND_EMAIL_SCRIPT},
    )
    run_execute(run_id=run.id, worker="test")
    approval = run.approvals.get()
    approval_handover(
        approval_id=approval.id, by=personas.alice, to="bob", note="the customer is a journalist"
    )
    approval_decide(
        approval_id=approval.id,
        reviewer=personas.bob,
        verdict="approve",
        checkpoint_id=str(approval.checkpoint_id),
    )
    (delivery,) = WebhookDelivery.objects.filter(endpoint=endpoint)
    body = json.loads(delivery.body)
    assert body["type"] == "approval.decided" and body["data"]["status"] == "approved"
    assert body["data"]["handover"]["by"] == "alice"
    assert body["data"]["handover"]["note"] == ""
    assert "journalist" not in delivery.body


def test_an_admins_webhook_reads_the_note_as_their_desk_does(personas):
    endpoint = endpoint_of(personas.admin, "approval.decided")
    run = run_submit(
        submitter=personas.admin,
        agent="demo",
        input="Tell Ada.",
        model={"provider": "scripted", "script": SEND_EMAIL_SCRIPT},
    )
    run_execute(run_id=run.id, worker="test")
    approval = run.approvals.get()
    approval_handover(
        approval_id=approval.id, by=personas.alice, to="bob", note="the customer is a journalist"
    )
    approval_decide(
        approval_id=approval.id,
        reviewer=personas.bob,
        verdict="approve",
        checkpoint_id=str(approval.checkpoint_id),
    )
    (delivery,) = WebhookDelivery.objects.filter(endpoint=endpoint)
    assert json.loads(delivery.body)["data"]["handover"]["note"] == "the customer is a journalist"
