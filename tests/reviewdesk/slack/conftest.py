from __future__ import annotations

import pytest

from tests.slack_stand_in import BOT_TOKEN, SIGNING_SECRET, SlackStandIn


@pytest.fixture
def slack(settings):
    """The Slack stand-in, up, with the desk's settings pointing at it (in this process)."""
    server = SlackStandIn()
    server.up()
    settings.SLACK_BOT_TOKEN = BOT_TOKEN
    settings.SLACK_SIGNING_SECRET = SIGNING_SECRET
    settings.SLACK_API_URL = server.url
    settings.DESK_PUBLIC_URL = "http://desk.test"
    settings.DESK_NOTIFY_EMAIL = True
    settings.DESK_SLACK_BACKOFF_SECONDS = 0
    yield server
    server.down()
