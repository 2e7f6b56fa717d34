"""Questions, escalation and email links on real processes (daphne, a Celery worker, beat,
headless Chromium), the model an OpenAI-compatible server so that what it reads is seen."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from reviewdesk.accounts.services import token_create
from tests.conftest import SEND_EMAIL_SCRIPT
from tests.e2e.conftest import http, start_stack, wait_for_run, wait_until
from tests.e2e.counting import outbox_messages
from tests.e2e.test_desk_browser import CHROMIUM, CHROMIUM_ARGS

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

COLOUR = {"question": "Which colour should the card be?", "options": ["red", "blue"]}


@pytest.fixture
def browser():
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "install Debian's chromium (.ci/run does it with apt-get)"
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield chromium
        chromium.close()


def log_in(page, url: str, username: str) -> None:
    page.goto(url + "/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", f"{username}-password")
    page.click("button[type=submit]")
    page.wait_for_load_state()


@pytest.fixture
def passwords(personas):
    for user in (personas.alice, personas.bob):
        user.set_password(f"{user.username}-password")
        user.save()
    _, carol = token_create(user=personas.carol, scopes=["submit"])
    _, alice = token_create(user=personas.alice, scopes=["review"])
    return {"carol": carol, "alice": alice}


def test_a_question_answered_on_the_desk_resumes_the_run_and_the_model_reads_the_answer(
    live_stack, llm_server, passwords, browser
):
    """The card arrives live with the question and an option button each; a click answers,
    the real worker resumes, and the model's next request carries the answer as the tool result."""
    from tests.llm_server import calls, text

    llm_server.script(calls(("ask_human", COLOUR)), text("Blue it is."))
    page = browser.new_page()
    log_in(page, live_stack.url, "alice")
    page.wait_for_selector("#live[data-state=live]", timeout=10_000)
    status, run = http(
        "POST",
        live_stack.url + "/api/v1/runs",
        token=passwords["carol"],
        body={"agent": "demo", "input": "Pick a colour", "model": {"provider": "openai", "name": "m"}},
    )
    assert status == 201, run

    card = page.locator(f"li.card:has(a[href='/runs/{run['id']}/'])")
    expect(card.locator(".question-text")).to_have_text(COLOUR["question"], timeout=15_000)
    expect(card.locator("button.option")).to_have_count(2)
    card.locator("button.option", has_text="blue").click()
    expect(page.locator(".flash.success")).to_contain_text("Answered ask_human", timeout=10_000)

    final = wait_for_run(live_stack, passwords["carol"], run["id"])
    assert final["status"] == "succeeded", final["error"]
    assert final["output"] == "Blue it is."
    (approval,) = final["approvals"]
    assert approval["kind"] == "question" and approval["decision"]["answer"] == "blue"
    tool_messages = [m for m in llm_server.requests[-1]["messages"] if m["role"] == "tool"]
    assert [json.loads(m["content"]) for m in tool_messages] == ["blue"]


def test_escalation_emails_the_next_reviewer_a_link_that_opens_the_page_but_never_decides(
    tmp_path, personas, passwords, browser
):
    """Beat on a 6 s target: alice is emailed, then reminded; past the target bob is emailed,
    the item appears live on his open desk with its clock, his link opens the page without
    deciding, his click there decides, and the used link is refused."""
    outbox = tmp_path / "outbox"
    env = {
        "DESK_CELERY_QUEUE": f"questions-{tmp_path.name}",
        "DESK_APPROVAL_TICK_SECONDS": "1",
        "DESK_RESPONSE_TARGETS": json.dumps({"demo.send_email": 6}),
        "DESK_ESCALATION_CHAINS": json.dumps({"demo.send_email": ["bob"]}),
        "DESK_NOTIFY_EMAIL": "1",
        "EMAIL_BACKEND": "django.core.mail.backends.filebased.EmailBackend",
        "EMAIL_FILE_PATH": str(outbox),
    }
    stack = start_stack(tmp_path, env_extra=env, beat=True)
    try:
        status, run = http(
            "POST",
            stack.url + "/api/v1/runs",
            token=passwords["carol"],
            body={
                "agent": "demo",
                "input": "Email Ada",
                "reviewers": ["alice"],
                "model": {"provider": "scripted", "script": SEND_EMAIL_SCRIPT},
            },
        )
        assert status == 201, run
        page = browser.new_page()
        log_in(page, stack.url, "bob")  # bob's desk is open before the item is his
        page.wait_for_selector("#live[data-state=live]", timeout=10_000)
        card = page.locator(f"li.card:has(a[href='/runs/{run['id']}/'])")
        expect(card).to_have_count(0)

        def mail_to(address: str, subject_part: str):
            found = [
                m
                for m in outbox_messages(outbox)
                if address in str(m["To"]) and subject_part in str(m["Subject"])
            ]
            return found or None

        assert wait_until(
            lambda: mail_to("alice@example.com", "waits for you"), timeout=30, what="alice's email"
        )
        assert wait_until(lambda: mail_to("alice@example.com", "Reminder"), timeout=30, what="the reminder")
        (escalated,) = wait_until(
            lambda: mail_to("bob@example.com", "Escalated"), timeout=30, what="bob's email"
        )
        link = re.search(r"http://\S+/approvals/link/\S+/", escalated.get_content()).group(0)
        _, current = http("GET", f"{stack.url}/api/v1/runs/{run['id']}", token=passwords["carol"])
        (approval,) = current["approvals"]
        assert approval["escalation_level"] == 1 and approval["reviewer"]["users"] == ["alice", "bob"]
        # Pushed live: the escalated item appears on bob's open desk, with its clock.
        expect(card.locator(".reviewer")).to_have_text("alice, bob", timeout=10_000)
        expect(card.locator(".countdown.target")).to_contain_text("target")

        page.goto(link)
        assert page.url == f"{stack.url}/approvals/{approval['id']}/"
        expect(page.locator("#decide-form button.approve")).to_be_visible()
        _, still = http("GET", f"{stack.url}/api/v1/approvals/{approval['id']}", token=passwords["alice"])
        assert still["status"] == "pending" and still["decision"] is None  # opening decided nothing

        natives: list[str] = []
        page.on("dialog", lambda dialog: (natives.append(dialog.message), dialog.dismiss()))
        page.locator("#decide-form button.approve").click()  # an ordinary email: nothing asks
        final = wait_for_run(stack, passwords["carol"], run["id"])
        assert final["status"] == "succeeded", final["error"]
        assert final["approvals"][0]["decision"]["reviewer"] == "bob"
        assert natives == []

        again = page.goto(link)
        assert again.status == 410
        expect(page.locator("#link-refused")).to_contain_text("used already")
    finally:
        stack.stop()


# The browser's Notification API and a background tab, stubbed before the desk's scripts run
# (an init script, outside the page's CSP): each notification shown is written on <body>.
BACKGROUND_TAB = """
(() => {
  let permission = "default";
  class RecordingNotification {
    constructor(title) { document.body.dataset.notified = title; }
    static get permission() { return permission; }
    static requestPermission() { permission = "granted"; return Promise.resolve(permission); }
  }
  window.Notification = RecordingNotification;
  Object.defineProperty(document, "hidden", { get: () => true });
})();
"""


def test_a_background_desk_shows_a_browser_notification_once_the_reviewer_allowed_it(
    live_stack, passwords, browser
):
    """Permission is asked from the button's click only; then a new approval arriving while
    the tab is hidden raises a notification naming it."""
    page = browser.new_page()
    page.add_init_script(BACKGROUND_TAB)
    log_in(page, live_stack.url, "alice")
    page.wait_for_selector("#live[data-state=live]", timeout=10_000)
    button = page.locator("#notify-permission")
    expect(button).to_be_visible()
    expect(page.locator("body")).not_to_have_attribute("data-notified", re.compile(".*"))
    button.click()
    expect(button).to_be_hidden()

    status, run = http(
        "POST",
        live_stack.url + "/api/v1/runs",
        token=passwords["carol"],
        body={
            "agent": "demo",
            "input": "Ask",
            "model": {
                "provider": "scripted",
                "script": [{"tool_calls": [{"name": "ask_human", "arguments": COLOUR}]}],
            },
        },
    )
    assert status == 201, run

    expect(page.locator("body")).to_have_attribute("data-notified", "A question from demo", timeout=15_000)
