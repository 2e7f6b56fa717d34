"""Reviewing in headless Chromium against daphne and a Celery worker: the context and the
preview, an edit signed after its diff, keyboard-only deciding, a colleague deciding first,
filters that survive a reload, and invisible characters on a live card."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from reviewdesk.accounts.services import token_create
from tests.conftest import SEND_EMAIL_SCRIPT
from tests.e2e.conftest import REPO, http, wait_for_run
from tests.e2e.test_desk_browser import CHROMIUM, CHROMIUM_ARGS
from tests.reviewdesk.desk.test_review_context import BIDI_SCRIPT, REFUND_SCRIPT

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

# The repository's var/ (the tests' own var/ is a temporary directory removed at exit).
SHOTS = REPO / "var" / "screenshots"


@pytest.fixture
def carol_token(personas) -> str:
    for user in (personas.alice, personas.bob):
        user.set_password(f"{user.username}-password")
        user.save()
    return token_create(user=personas.carol, scopes=["submit"])[1]


@pytest.fixture
def browser():
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "install Debian's chromium (.ci/run does it with apt-get)"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield browser
        browser.close()


def log_in(browser, stack, username: str, path: str = "/"):
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    page.goto(stack.url + "/accounts/login/?next=" + path)
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", f"{username}-password")
    page.click("button[type=submit]")
    page.wait_for_load_state()
    return page


def submit(stack, token: str, script, text: str = "Tell Ada her refund is on its way.") -> str:
    status, run = http(
        "POST",
        stack.url + "/api/v1/runs",
        token=token,
        body={"agent": "demo", "input": text, "model": {"provider": "scripted", "script": script}},
    )
    assert status == 201, run
    return run["id"]


def card_for(page, run_id: str):
    return page.wait_for_selector(f"li.card:has(a.run[href='/runs/{run_id}/'])", timeout=20_000)


def shoot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    for width, label in ((1280, "1280"), (390, "phone")):
        page.set_viewport_size({"width": width, "height": 900})
        page.screenshot(path=str(SHOTS / f"{name}-{label}.png"), full_page=True)
    page.set_viewport_size({"width": 1280, "height": 900})


def test_the_approval_page_shows_context_and_preview_and_an_edit_is_signed_after_its_diff(
    live_stack, carol_token, browser
):
    run_id = submit(live_stack, carol_token, REFUND_SCRIPT)
    desk = log_in(browser, live_stack, "alice")
    card_for(desk, run_id)
    assert (
        "demo" in desk.text_content("li.card .agent") and desk.text_content("li.card .submitter") == "carol"
    )
    shoot(desk, "desk")
    desk.keyboard.press("o")
    desk.wait_for_selector("#what-will-happen")
    page = desk
    facts = page.text_content("#what-is-this + dl")
    assert "Tell Ada her refund is on its way." in facts and "carol" in facts
    assert "Refund part or all of an order." in facts
    assert (
        page.text_content("#asking-text").strip() == "Ada was charged twice; I will refund the order in full."
    )
    assert "model text, untrusted" in page.text_content("#why-asks")
    assert "Left after it0.00" in page.text_content("#preview .preview-rows")
    shoot(page, "approval")

    page.keyboard.press("e")
    textarea = page.locator("#edit-arguments")
    textarea.fill('{"order_id": "A-1001", "amount": -5}')
    page.wait_for_selector("#schema-errors li")
    assert page.text_content("#schema-errors") == "amount: must be more than 0"
    assert page.is_disabled("#edit-submit")
    textarea.fill('{"order_id": "A-1001", "amount": 200}')
    # A locator wait: wait_for_function evaluates a string, which the page's CSP rightly forbids.
    expect(page.locator("#preview")).to_contain_text("Left after it50.00")
    assert "This refund200.00" in page.text_content("#preview .preview-rows")
    page.click("#edit-submit")  # first: the diff, nothing signed yet
    assert page.is_visible("#diff")
    # Keys sorted on both sides, so the diff is the same whatever order the database keeps.
    assert page.locator("#diff-lines .del").all_text_contents() == ['-   "amount": 250,\n']
    assert page.locator("#diff-lines .ins").all_text_contents() == ['+   "amount": 200,\n']
    shoot(page, "approval-edit-diff")
    page.click("#edit-submit")  # then: sign
    page.wait_for_selector(".flash.success")
    final = wait_for_run(live_stack, carol_token, run_id)
    assert final["status"] == "succeeded", final["error"]
    decision = final["approvals"][0]["decision"]
    assert (decision["verdict"], decision["reviewer"]) == ("edit", "alice")
    assert decision["arguments"] == {"order_id": "A-1001", "amount": 200}
    run_page = log_in(browser, live_stack, "alice", f"/runs/{run_id}/")
    shoot(run_page, "run")


def test_a_reviewer_decides_two_approvals_with_the_keyboard_alone(live_stack, carol_token, browser):
    email_run = submit(live_stack, carol_token, SEND_EMAIL_SCRIPT)
    refund_run = submit(live_stack, carol_token, REFUND_SCRIPT)
    page = log_in(browser, live_stack, "alice", f"/?run={email_run}")
    card_for(page, email_run)
    page.goto(live_stack.url + "/")
    card_for(page, email_run)
    card_for(page, refund_run)
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.accept()))
    first = page.get_attribute("li.card[aria-current=true]", "data-run")
    page.keyboard.press("?")
    assert page.is_visible("#keys-help")
    page.keyboard.press("Escape")
    if first != email_run:
        page.keyboard.press("j")
    assert page.get_attribute("li.card[aria-current=true]", "data-run") == email_run
    # g: the approval's page, its grant fields open and ticked; back to the queue, nothing decided.
    page.keyboard.press("g")
    page.wait_for_url(re.compile(r"/approvals/[0-9a-f-]+/#grant$"))
    assert page.is_checked("#grant-on") and page.get_attribute("#grant", "open") is not None
    page.goto(live_stack.url + "/")
    card_for(page, refund_run)
    if page.get_attribute("li.card[aria-current=true]", "data-run") != email_run:
        page.keyboard.press("j")
    assert page.get_attribute("li.card[aria-current=true]", "data-run") == email_run
    # Its preview read (the summary says nothing is unusual about it), `a` decides at once: no
    # confirmation on every email, which trained Enter (issue 35, item 7). The unusual ones ask
    # in a page dialog: tests/e2e/test_desk_second_pass.py.
    expect(page.locator(f"li.card[data-run='{email_run}']")).to_have_attribute("data-summary", "ready")
    page.keyboard.press("a")
    page.wait_for_selector(f"li.card[data-run='{email_run}']", state="detached")
    assert dialogs == []
    expect(page.locator("dialog#confirm")).not_to_be_visible()
    # The next item is selected and focus stays in the queue.
    assert page.get_attribute("li.card[aria-current=true]", "data-run") == refund_run
    assert page.evaluate("document.activeElement.dataset.run") == refund_run
    page.keyboard.press("r")
    page.keyboard.type("not without a manager")
    page.keyboard.press("Enter")
    page.wait_for_selector(f"li.card[data-run='{refund_run}']", state="detached")
    assert dialogs == []  # rejecting asks nothing
    assert page.text_content("#count") == "0" and page.title().startswith("(0) ")
    email = wait_for_run(live_stack, carol_token, email_run)
    refund = wait_for_run(live_stack, carol_token, refund_run)
    assert email["approvals"][0]["decision"]["verdict"] == "approve"
    rejected = next(a for a in refund["approvals"] if a["tool"] == "refund_payment")["decision"]
    assert (rejected["verdict"], rejected["reason"]) == ("reject", "not without a manager")


def test_when_bob_decides_first_alices_card_leaves_and_her_approval_page_says_so(
    live_stack, carol_token, browser
):
    run_id = submit(live_stack, carol_token, SEND_EMAIL_SCRIPT)
    desk = log_in(browser, live_stack, "alice")
    card = card_for(desk, run_id)
    approval_url = card.query_selector("a.details").get_attribute("href")
    detail = log_in(browser, live_stack, "alice", approval_url)
    detail.wait_for_selector("#decide-form")
    # Both of alice's pages hold a live socket before bob decides: what follows is a push.
    desk.wait_for_selector("#approvals[data-synced='1']", timeout=20_000)
    detail.wait_for_selector("[data-socket=live]", timeout=20_000)
    bob = log_in(browser, live_stack, "bob", approval_url)
    natives: list[str] = []
    bob.on("dialog", lambda d: (natives.append(d.message), d.dismiss()))
    bob.click("#decide-form button.approve")  # an ordinary email: nothing asks
    bob.wait_for_selector(".flash.success")
    assert natives == []

    desk.wait_for_selector(f"li.card[data-run='{run_id}']", state="detached", timeout=10_000)
    assert "approve by bob" in desk.text_content("#notices")
    detail.wait_for_selector("#decided-notice:not([hidden])", timeout=10_000)
    assert detail.text_content("#decided-notice").startswith("Decided by bob (approve")
    assert detail.is_disabled("#decide-form button.approve") and detail.is_disabled(
        "#decide-form button.reject"
    )
    detail.keyboard.press("a")  # the key does nothing now
    assert detail.url.endswith(approval_url)


def test_filters_live_in_the_url_and_survive_a_reload(live_stack, carol_token, browser):
    page = log_in(browser, live_stack, "alice")
    page.select_option("select[name=tool]", "refund_payment")
    page.click("#filters button[type=submit]")
    page.wait_for_url("**tool=refund_payment**")
    page.reload()
    page.wait_for_selector("#live[data-state=live]")
    assert page.input_value("select[name=tool]") == "refund_payment"
    email_run = submit(live_stack, carol_token, SEND_EMAIL_SCRIPT)
    refund_run = submit(live_stack, carol_token, REFUND_SCRIPT)
    card_for(page, refund_run)
    assert page.query_selector(f"li.card[data-run='{email_run}']") is None
    assert page.locator("li.card").count() == 1
    page.reload()
    card_for(page, refund_run)
    assert page.locator("li.card").count() == 1
    assert page.input_value("select[name=tool]") == "refund_payment"


def test_a_bidi_override_in_the_arguments_is_shown_escaped_and_flagged_on_the_live_card(
    live_stack, carol_token, browser
):
    page = log_in(browser, live_stack, "alice")
    page.wait_for_selector("#live[data-state=live]")
    run_id = submit(live_stack, carol_token, BIDI_SCRIPT)
    card = card_for(page, run_id)  # built by desk.js from the socket's event
    args = card.query_selector(".args").text_content()
    assert "\u202e" not in args and "\u200b" not in args
    assert '"to": "ada@example.com\\u202egro.live"' in args and '"body": "x\\u200by"' in args
    assert "contains invisible characters" in card.query_selector(".invisible-flag").text_content()
