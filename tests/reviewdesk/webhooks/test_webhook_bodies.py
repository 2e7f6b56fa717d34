"""What a webhook's body carries of an event, as written when the event log is dispatched
(in-process: the rows, not their sending, which test_webhooks.py covers with a real worker and
receiver)."""

from __future__ import annotations

import json

import pytest

from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.approvals.lifecycle.handover import approval_handover
from reviewdesk.webhooks.models import WebhookDelivery, WebhookEndpoint
from reviewdesk.webhooks.services import webhooks_dispatch

pytestmark = pytest.mark.django_db

NOTE = "the customer is a journalist"


@pytest.mark.parametrize("admin", [False, True], ids=["submitter", "admin submitter"])
def test_a_decided_calls_body_shows_a_hand_overs_note_only_to_whom_the_desk_shows_it(
    personas, interrupted_run, admin
):
    """The submitter is not who the note is for (approvals.reads.representation.approval_for): the desk and the
    run's feeds leave it blank for them, and so does their webhook; an admin reads it there as
    on their desk."""
    if admin:
        personas.carol.is_staff = True
        personas.carol.save()
    endpoint = WebhookEndpoint.objects.create(
        owner=personas.carol, url="https://hooks.example.com/x", events=["approval.decided"], secret="s"
    )
    _, approval = interrupted_run()
    approval_handover(approval_id=approval.id, by=personas.alice, to="bob", note=NOTE)
    approval_decide(
        approval_id=approval.id,
        reviewer=personas.bob,
        verdict="approve",
        checkpoint_id=str(approval.checkpoint_id),
    )
    webhooks_dispatch()
    (delivery,) = WebhookDelivery.objects.filter(endpoint=endpoint)
    body = json.loads(delivery.body)
    assert body["type"] == "approval.decided" and body["data"]["status"] == "approved"
    assert body["data"]["handover"]["by"] == "alice"
    assert body["data"]["handover"]["note"] == (NOTE if admin else "")
    assert (NOTE in delivery.body) is admin
