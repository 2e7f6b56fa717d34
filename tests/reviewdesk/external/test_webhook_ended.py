"""A framework that waits on its webhook hears of a call that will get no decision: expired, or
cancelled with its run (`approval.ended`), as it hears of a decision (`approval.decided`). The
deliveries as written when the event log is dispatched (in-process: the rows, not their sending,
which tests/reviewdesk/webhooks/test_webhooks.py covers with a real worker and receiver)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from reviewdesk.approvals.lifecycle.expiry import approvals_expire
from reviewdesk.approvals.models import ApprovalRequest
from reviewdesk.webhooks.models import WebhookDelivery, WebhookEndpoint
from reviewdesk.webhooks.services import webhooks_dispatch

pytestmark = pytest.mark.django_db


@pytest.fixture
def hook(personas):
    return WebhookEndpoint.objects.create(
        owner=personas.carol,
        url="https://hooks.example.com/framework",
        events=["approval.decided", "approval.ended"],
        secret="s",
    )


def bodies(endpoint: WebhookEndpoint) -> list[dict]:
    webhooks_dispatch()
    return [
        json.loads(d.body) for d in WebhookDelivery.objects.filter(endpoint=endpoint).order_by("event_seq")
    ]


def test_an_expired_external_call_is_told_as_ended(hook, submitted):
    _, approval_id = submitted()
    ApprovalRequest.objects.filter(pk=approval_id).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert approvals_expire(now=timezone.now()) == 1
    [body] = bodies(hook)
    assert body["type"] == "approval.ended"
    assert (body["data"]["id"], body["data"]["status"], body["data"]["decision"]) == (
        approval_id,
        "expired",
        None,
    )


def test_a_call_cancelled_with_its_run_is_told_as_ended(
    hook, submitted, api_as, personas, django_capture_on_commit_callbacks
):
    data, approval_id = submitted()
    with django_capture_on_commit_callbacks(execute=True):
        api_as(personas.carol, "submit").post(f"/api/v1/runs/{data['run']['id']}/cancel")
    ended = [b for b in bodies(hook) if b["type"] == "approval.ended"]
    assert [(b["data"]["id"], b["data"]["status"]) for b in ended] == [(approval_id, "cancelled")]


def test_an_endpoint_that_did_not_ask_for_ended_hears_only_of_decisions(personas, submitted):
    decided_only = WebhookEndpoint.objects.create(
        owner=personas.carol, url="https://hooks.example.com/d", events=["approval.decided"], secret="s"
    )
    _, approval_id = submitted()
    ApprovalRequest.objects.filter(pk=approval_id).update(expires_at=timezone.now() - timedelta(seconds=1))
    approvals_expire(now=timezone.now())
    assert bodies(decided_only) == []
