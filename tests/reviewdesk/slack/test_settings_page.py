"""The settings page's Slack section exists only on a desk with a Slack app configured (both
secrets set): without one there is nothing to link, and its buttons refuse."""

from __future__ import annotations

import pytest
from django.test import Client

from reviewdesk.slack.models import SlackLinkCode

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice_client(personas) -> Client:
    client = Client()
    client.force_login(personas.alice)
    return client


@pytest.mark.parametrize("token, secret", [("", ""), ("xoxb-set", ""), ("", "secret-set")])
def test_without_slack_configured_the_section_is_absent_and_no_code_is_made(
    alice_client, settings, token, secret
):
    settings.SLACK_BOT_TOKEN, settings.SLACK_SIGNING_SECRET = token, secret
    page = alice_client.get("/settings/")
    assert page.status_code == 200
    assert b"notification-settings" in page.content  # the page itself is there
    assert b"slack-settings" not in page.content and b"Link Slack" not in page.content

    answer = alice_client.post("/settings/slack/code/", follow=True)
    assert b"This desk has no Slack app configured." in answer.content
    assert b"slack-code" not in answer.content
    assert not SlackLinkCode.objects.exists()


def test_with_slack_configured_the_section_offers_a_link(alice_client, slack):
    page = alice_client.get("/settings/")
    assert b'id="slack-settings"' in page.content and b"Link Slack" in page.content

    shown = alice_client.post("/settings/slack/code/")
    assert shown.status_code == 200 and b'id="slack-code"' in shown.content
    assert shown["Cache-Control"] == "no-store"  # the code is not kept for the back button
    assert SlackLinkCode.objects.filter(user__username="alice", used_at__isnull=True).count() == 1
