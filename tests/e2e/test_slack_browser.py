"""Linking Slack in headless Chromium on real processes (daphne, a Celery worker, Redis), with
the Slack stand-in as the only fake: alice asks the settings page for a code, "Slack" sends
`/desk link CODE` signed as Slack signs it to daphne's /slack/commands, and the page then shows
the link; she turns Slack notifications off and unlinks. A code works once, a code replaced by
a newer one works never, and an unlinked Slack user is a stranger again.

Screenshots of each state (and of an approval page's admin-only "Slack messages" table) go to
DESK_SHOTS_DIR when it is set, at a desktop's and a phone's width, for a reviewer's eye."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.utils import timezone
from playwright.sync_api import expect

from reviewdesk.accounts.services import token_create
from reviewdesk.slack.models import MessageKind, MessageState, SlackLink, SlackMessage, SlackMessageItem
from tests.e2e.conftest import start_stack
from tests.e2e.test_desk_browser import CHROMIUM, CHROMIUM_ARGS
from tests.e2e.test_device_keys import email_run_waiting, logged_in, off_the_loop
from tests.slack_stand_in import BOT_TOKEN, SIGNING_SECRET, SlackStandIn, command_body, signed_headers

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

ALICE_IN_SLACK = "U0ALICE42"
SHOTS = os.environ.get("DESK_SHOTS_DIR", "")
WIDTHS = {"desktop": (1280, 900), "phone": (390, 844)}


@pytest.fixture
def slack_stand_in():
    server = SlackStandIn()
    server.up()
    yield server
    server.down()


@pytest.fixture
def slack_stack(tmp_path, slack_stand_in, redis_server):
    """daphne and a worker with the Slack app configured, pointed at the stand-in."""
    stack = start_stack(
        tmp_path,
        env_extra={
            "SLACK_BOT_TOKEN": BOT_TOKEN,
            "SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "SLACK_API_URL": slack_stand_in.url,
            "DESK_CELERY_QUEUE": f"{settings.CELERY_TASK_DEFAULT_QUEUE}-slack-{uuid.uuid4().hex[:8]}",
        },
    )
    yield stack
    stack.stop()


@pytest.fixture
def logins(personas) -> dict[str, str]:
    for user in (personas.alice, personas.admin):
        user.set_password(f"{user.username}-password")
        user.save()
    _, carol_token = token_create(user=personas.carol, scopes=["submit", "review"])
    return {"carol_token": carol_token}


@pytest.fixture
def browser(logins):
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "install Debian's chromium (.ci/run does it with apt-get)"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield browser
        browser.close()


def slash_command(stack, text: str, *, user: str = ALICE_IN_SLACK, signed: bool = True) -> tuple[int, str]:
    """POST `/desk TEXT` to daphne as Slack does: form-encoded, signed with the app's secret."""
    body = command_body(text, user=user)
    request = urllib.request.Request(stack.url + "/slack/commands", data=body, method="POST")
    request.add_header("Content-Type", "application/x-www-form-urlencoded")
    for name, value in (signed_headers(body) if signed else {}).items():
        request.add_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            answer = json.loads(response.read())
            assert answer["response_type"] == "ephemeral", answer  # seen by the sender only
            return response.status, answer["text"]
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def shoot(page, name: str) -> None:
    """The page at a desktop's and a phone's width, whole, when DESK_SHOTS_DIR asks for it."""
    if not SHOTS:
        return
    Path(SHOTS).mkdir(parents=True, exist_ok=True)
    for label, (width, height) in WIDTHS.items():
        page.set_viewport_size({"width": width, "height": height})
        page.screenshot(path=f"{SHOTS}/{name}-{label}.png", full_page=True)
    page.set_viewport_size({"width": 1280, "height": 900})


def link_code(page) -> str:
    page.locator("#slack-link button[type=submit]").click()
    shown = page.locator("#slack-code")
    expect(shown).to_be_visible()
    text = shown.text_content().strip()
    assert text.startswith("/desk link "), text
    return text.removeprefix("/desk link ")


def test_alice_links_slack_from_the_settings_page_turns_notifications_off_and_unlinks(
    slack_stack, logins, personas, browser
):
    alice = logged_in(browser, slack_stack.url + "/settings/", "alice")
    section = alice.locator("#slack-settings")
    expect(section).to_be_visible()
    expect(section.locator("h2")).to_have_text("Slack")
    expect(alice.locator("#slack-link button")).to_have_text("Link Slack")
    shoot(alice, "settings-1-unlinked")

    # A code replaced by a newer one (a second click on Link Slack) links nobody.
    replaced = link_code(alice)
    alice.goto(slack_stack.url + "/settings/")
    code = link_code(alice)
    assert code != replaced
    assert len(code) == 14 and code.count("-") == 2, code  # XXXX-XXXX-XXXX
    shoot(alice, "settings-2-code")
    status, text = slash_command(slack_stack, f"link {replaced}")
    assert status == 200 and text.startswith("Not linked:"), text

    # Not signed with the app's secret: refused before it is read.
    status, text = slash_command(slack_stack, f"link {code}", signed=False)
    assert status == 401, text

    status, text = slash_command(slack_stack, f"link {code}")
    assert status == 200 and text.startswith("Linked:") and "desk account alice" in text, text
    # Once only: the same code again (a retry, someone who read it over her shoulder) is refused.
    status, text = slash_command(slack_stack, f"link {code}", user="U0MALLORY")
    assert status == 200 and text.startswith("Not linked:") and "used" in text, text
    status, text = slash_command(slack_stack, "help")
    assert "linked to desk account alice" in text, text

    # The code was drawn in answer to a POST: the page sends her to a fresh GET of her settings
    # (a reload would post the form again, and ask for a new code while she is linked).
    alice.locator("#slack-after-code").click()
    expect(alice.locator("#slack-linked")).to_contain_text(f"Linked to Slack user {ALICE_IN_SLACK}")
    notify = alice.locator("#slack-notify input[name=notify]")
    expect(notify).to_be_checked()
    expect(alice.locator("#slack-link")).to_have_count(0)
    shoot(alice, "settings-3-linked")

    notify.uncheck()
    alice.locator("#slack-notify button[type=submit]").click()
    expect(alice.locator("body")).to_contain_text("Notifications now come to you by mail.")
    expect(alice.locator("#slack-notify input[name=notify]")).not_to_be_checked()
    assert off_the_loop(lambda: SlackLink.objects.get(user__username="alice").notify) is False
    shoot(alice, "settings-4-notify-off")

    alice.locator("#slack-unlink button[type=submit]").click()
    expect(alice.locator("body")).to_contain_text("Unlinked:")
    expect(alice.locator("#slack-linked")).to_have_count(0)
    expect(alice.locator("#slack-link button")).to_have_text("Link Slack")
    assert off_the_loop(lambda: SlackLink.objects.filter(user__username="alice").exists()) is False
    shoot(alice, "settings-5-unlinked-again")

    # Unlinked, her Slack user is a stranger; the code that linked it does not bring it back.
    status, text = slash_command(slack_stack, "help")
    assert "You are not linked yet." in text, text
    status, text = slash_command(slack_stack, f"link {code}")
    assert text.startswith("Not linked:"), text
    assert off_the_loop(lambda: SlackLink.objects.exists()) is False


def test_an_admin_sees_where_the_slack_messages_about_an_item_stand(slack_stack, logins, personas, browser):
    run = email_run_waiting(slack_stack, logins["carol_token"], "Email Ada the launch date, via Slack")
    approval_id = run["approvals"][0]["id"]

    def messages() -> None:
        now = timezone.now()
        mailed = SlackMessage.objects.create(
            kind=MessageKind.ITEM,
            user=personas.alice,
            occasion="announced",
            target=ALICE_IN_SLACK,
            state=MessageState.EMAILED,
            attempts=5,
            due_at=now - timedelta(minutes=3),
            last_error="SlackApiError: The request to the Slack API failed. (url: "
            "http://127.0.0.1/api/chat.postMessage) The server responded with: "
            "{'ok': False, 'error': 'service_unavailable'}",
        )
        posted = SlackMessage.objects.create(
            kind=MessageKind.CHANNEL,
            target="C0REVIEWERSQUEUE",
            channel="C0REVIEWERSQUEUE",
            ts="1765100000.000001",
            state=MessageState.SENT,
            attempts=1,
            due_at=now,
            sent_at=now,
        )
        for message in (mailed, posted):
            SlackMessageItem.objects.create(message=message, request_id=approval_id)

    off_the_loop(messages)

    admin = logged_in(browser, f"{slack_stack.url}/approvals/{approval_id}/", "admin")
    table = admin.locator("#slack-deliveries")
    expect(table).to_be_visible()
    rows = table.locator("tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_contain_text("alice")
    expect(rows.nth(0)).to_contain_text("mailed instead")
    expect(rows.nth(0)).to_contain_text("service_unavailable")  # the cause, at its end
    expect(rows.nth(1)).to_contain_text("channel C0REVIEWERSQUEUE")
    admin.locator("#slack-delivery").scroll_into_view_if_needed()
    shoot(admin, "approval-slack-messages")
    if SHOTS:  # the table itself, at a phone's width: a full page hides it among the rest
        admin.set_viewport_size({"width": 390, "height": 844})
        admin.locator("#slack-delivery").scroll_into_view_if_needed()
        admin.screenshot(path=f"{SHOTS}/approval-slack-messages-phone-table.png")
        admin.set_viewport_size({"width": 1280, "height": 900})

    # Alice, no admin, is not shown the table.
    alice = logged_in(browser, f"{slack_stack.url}/approvals/{approval_id}/", "alice")
    expect(alice.locator("#arguments")).to_be_visible()
    expect(alice.locator("#slack-deliveries")).to_have_count(0)
