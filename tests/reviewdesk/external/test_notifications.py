"""An external call reaches its reviewers as a desk run's does: an email with a one-time link,
on the response-time clock an operator sets for the framework's agent and tool."""

from __future__ import annotations

import pytest
from django.utils import timezone

from reviewdesk.approvals.lifecycle.notify import approvals_notify
from reviewdesk.approvals.models import ApprovalRequest
from tests.reviewdesk.external.conftest import submit_body

pytestmark = pytest.mark.django_db


def test_the_assigned_reviewer_is_mailed_once_with_a_link(submitted, settings, mailoutbox):
    settings.DESK_NOTIFY_EMAIL = True
    settings.DESK_PUBLIC_URL = "http://desk.test"
    settings.DESK_RESPONSE_TARGETS = {"support-bot.refund_payment": 60}
    _, approval_id = submitted(submit_body(reviewers=["alice"]))
    approval = ApprovalRequest.objects.get(pk=approval_id)
    assert abs((approval.respond_by - approval.created_at).total_seconds() - 60) < 1
    assert approvals_notify(now=timezone.now()) == 1
    assert approvals_notify(now=timezone.now()) == 0
    (message,) = mailoutbox
    assert message.to == ["alice@example.com"]
    assert "refund_payment" in message.subject and "support-bot" in message.subject
    assert "http://desk.test/approvals/link/" in message.body
