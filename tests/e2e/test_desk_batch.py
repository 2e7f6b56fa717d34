"""Batch deciding on the desk in headless Chromium against daphne and a Celery worker: a batch
of three where a colleague decided one meanwhile, and picking with the keyboard alone."""

from __future__ import annotations

import copy
from concurrent.futures import ThreadPoolExecutor

import pytest
from playwright.sync_api import expect

from agents.decisions import signature_valid
from reviewdesk.accounts.services import token_create
from reviewdesk.approvals.models import Decision
from reviewdesk.approvals.signing import FileKeyring
from tests.conftest import SEND_EMAIL_SCRIPT
from tests.e2e.conftest import http
from tests.e2e.test_desk_review import browser, card_for, carol_token, log_in, submit  # noqa: F401

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def bob_token(personas) -> str:
    return token_create(user=personas.bob, scopes=["review"])[1]


def outside_the_loop(query):
    """Run a database query in a thread of its own: Playwright's loop owns this one."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(query).result()


def decisions_for(run_ids: list[str]) -> list[Decision]:
    def query():
        rows = Decision.objects.select_related("reviewer", "request").filter(request__run_id__in=run_ids)
        return sorted(rows, key=lambda d: run_ids.index(str(d.request.run_id)))

    return outside_the_loop(query)


def email_script(to: str) -> list:
    script = copy.deepcopy(SEND_EMAIL_SCRIPT)
    script[0]["tool_calls"][1]["arguments"]["to"] = to
    return script


def card_approval(page, run_id: str) -> dict:
    card = f"li.card[data-run='{run_id}']"
    return {
        "id": page.get_attribute(card, "data-approval-id"),
        "checkpoint_id": page.get_attribute(f"{card} form.tool-call input[name=checkpoint_id]", "value"),
    }


def test_a_batch_of_three_with_one_decided_meanwhile_signs_two_and_reports_the_third(
    live_stack,
    carol_token,  # noqa: F811
    bob_token,
    browser,  # noqa: F811
):
    runs = [
        submit(live_stack, carol_token, email_script(f"{name}@example.com")) for name in ("ada", "bea", "cy")
    ]
    page = log_in(browser, live_stack, "alice")
    for run_id in runs:
        card_for(page, run_id)
    page.wait_for_selector("#approvals[data-synced='1']", timeout=20_000)
    for run_id in runs:  # picked with the mouse: the page may hold other tests' send_email calls
        page.check(f"li.card[data-run='{run_id}'] input.batch-pick")
    expect(page.locator("#batch-count")).to_have_text("3 selected")
    # The fields that differ from the first picked card are marked on the others.
    # The fields that differ, with this card's value (a field's name alone said nothing).
    expect(page.locator(f"li.card[data-run='{runs[1]}'] .differs mark")).to_have_text(
        ['to: "bea@example.com"']
    )
    expect(page.locator(f"li.card[data-run='{runs[0]}'] .differs")).to_be_hidden()

    taken = card_approval(page, runs[1])
    asked: list[str] = []
    page.on("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
    page.click("#batch-approve")
    # One page dialog lists every call with its facts; bea and cy are no known customers:
    # their previews' warnings are listed too, in red, and the focus waits on Cancel.
    confirm = page.locator("dialog#confirm")
    expect(confirm).to_be_visible()
    items = confirm.locator("#confirm-items > li")
    expect(items).to_have_count(3)
    for item, name in zip(items.all(), ("ada", "bea", "cy"), strict=True):
        expect(item.locator("dl.facts")).to_contain_text(f"{name}@example.com")
    expect(items.nth(1).locator(".warning")).to_contain_text(
        "bea@example.com is not a known customer's address"
    )
    expect(page.locator("#confirm-cancel")).to_be_focused()
    # While alice reads the one confirmation, bob approves the middle call through the API.
    status, body = http(
        "POST",
        f"{live_stack.url}/api/v1/approvals/{taken['id']}/decision",
        token=bob_token,
        body={"verdict": "approve", "checkpoint_id": taken["checkpoint_id"]},
    )
    assert status == 201, body
    page.click("#confirm-ok")
    report = page.locator("#notices .flash.error", has_text="2 approved, 1 refused")
    expect(report).to_be_visible(timeout=20_000)
    assert (
        f"send_email (run {runs[1][:8]}…): this approval was already approved by bob" in report.text_content()
    )
    assert asked == []  # never the browser's window.confirm
    for run_id in runs:
        page.wait_for_selector(f"li.card[data-run='{run_id}']", state="detached")

    keys = FileKeyring()
    decisions = decisions_for(runs)  # one signed decision each
    assert [(d.verdict, d.reviewer.username) for d in decisions] == [
        ("approve", "alice"),
        ("approve", "bob"),
        ("approve", "alice"),
    ]
    for decision in decisions:
        assert signature_valid(keys.public_key(decision.key_id), decision.payload, decision.signature)


def test_x_and_shift_a_pick_with_the_keyboard_and_one_reason_rejects_the_batch(
    live_stack,
    carol_token,  # noqa: F811
    browser,  # noqa: F811
):
    # Known customers: nothing unusual, so "all similar" takes them (an unknown address is
    # left out: tests/e2e/test_desk_second_pass.py).
    runs = [submit(live_stack, carol_token, email_script(f"{name}@example.com")) for name in ("ada", "grace")]
    page = log_in(browser, live_stack, "alice")
    for run_id in runs:
        card_for(page, run_id)
    page.wait_for_selector("#approvals[data-synced='1']", timeout=20_000)
    for run_id in runs:
        expect(page.locator(f"li.card[data-run='{run_id}']")).to_have_attribute("data-summary", "ready")
    # Walk to the first of the two with j, pick it with x, then unpick and pick it again.
    for _ in range(page.locator("li.card").count()):
        if page.get_attribute("li.card[aria-current=true]", "data-run") == runs[0]:
            break
        page.keyboard.press("j")
    page.keyboard.press("x")
    expect(page.locator("#batch-count")).to_have_text("1 selected")
    page.keyboard.press("x")
    expect(page.locator("#batch")).to_be_hidden()
    page.keyboard.press("x")
    page.keyboard.press("Shift+A")  # every send_email on the page, compared with this one
    emails = page.locator("li.card[data-tool='send_email'][data-unusual='[]']")
    expect(page.locator("li.card[data-picked=yes]")).to_have_count(emails.count())
    expect(page.locator("li.card[data-picked=yes]:not([data-tool='send_email'])")).to_have_count(0)
    expect(page.locator(f"li.card[data-run='{runs[1]}'] .differs mark")).to_have_text(
        ['to: "grace@example.com"']
    )
    picked = emails.count()

    page.focus("#batch-reason")
    page.keyboard.type("wrong template")
    page.keyboard.press("Enter")  # rejecting asks nothing
    expect(page.locator("#notices .flash.success", has_text=f"{picked} rejected")).to_be_visible(
        timeout=20_000
    )
    decisions = decisions_for(runs)
    assert [(d.verdict, d.reason, d.reviewer.username) for d in decisions] == [
        ("reject", "wrong template", "alice")
    ] * 2
