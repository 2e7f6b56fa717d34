"""The desk page with more pending than one page, in headless Chromium on the live stack:
the socket's snapshot is the page's own window, and approvals that arrive live beyond it are
counted and linked ("N more — next page"), never drawn past the page size."""

from __future__ import annotations

import pytest
from django.db import transaction
from playwright.sync_api import expect

from reviewdesk.approvals.reads.queue import QUEUE_PAGE_SIZE
from reviewdesk.events.services import event_emit
from reviewdesk.runs.execution import run_execute
from reviewdesk.runs.services import run_submit
from tests.conftest import SEND_EMAIL_SCRIPT
from tests.e2e import test_desk_browser
from tests.e2e.test_desk_browser import approval_event_data, in_worker_thread
from tests.reviewdesk.desk.test_snapshot_window import clone_pending

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

# The browser and its logins, as the desk's browser tests set them up.
logins = test_desk_browser.logins
browser_page = test_desk_browser.browser_page

BEYOND = 4  # pending past the first page when the page loads


def seed_queue(carol) -> int:
    """One real waiting run, its approval cloned past a page; how many are pending."""
    run = run_submit(
        submitter=carol,
        agent="demo",
        input="Tell Ada her refund is on its way.",
        model={"provider": "scripted", "script": SEND_EMAIL_SCRIPT},
        approval_ttl_seconds=600,  # sooner than every clone: the first card
    )
    run_execute(run_id=run.id, worker="in-process")
    clone_pending(run.approvals.get(status="pending"), QUEUE_PAGE_SIZE + BEYOND - 1)
    return QUEUE_PAGE_SIZE + BEYOND


def push(type_: str, data: dict) -> None:
    def commit():
        with transaction.atomic():
            event_emit(type=type_, data=data)

    in_worker_thread(commit)


def log_in(page, url: str) -> None:
    page.goto(url)
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", "alice-password")
    page.click("button[type=submit]")
    if page.locator("#live").count():
        page.wait_for_selector("#live[data-state=live]", timeout=10_000)


def test_live_arrivals_beyond_the_page_are_counted_and_linked_not_drawn(
    live_stack, logins, browser_page, personas
):
    page = browser_page
    total = in_worker_thread(lambda: seed_queue(personas.carol))
    log_in(page, live_stack.url + "/")
    cards = page.locator("#approvals li.card")
    expect(cards).to_have_count(QUEUE_PAGE_SIZE)
    expect(page.locator("#count")).to_have_text(str(total))
    expect(page.locator("#off-page")).to_be_hidden()

    # Open to every reviewer and expiring last: it belongs on the last page.
    late = approval_event_data("late_tool")
    push("approval.created", late)
    expect(page.locator("#count")).to_have_text(str(total + 1))
    expect(page.locator("#off-page")).to_have_text("1 more — next page →")
    assert f"offset={QUEUE_PAGE_SIZE}" in page.locator("#off-page a").get_attribute("href")
    expect(page.locator(f"li.card[data-approval-id='{late['id']}']")).to_have_count(0)

    # Assigned to alice: mine first, so it joins this page and pushes its last card off.
    mine = {**approval_event_data("mine_tool"), "reviewer": {"users": ["alice"], "group": "reviewers"}}
    push("approval.created", mine)
    expect(cards.first).to_have_attribute("data-approval-id", mine["id"])
    expect(cards).to_have_count(QUEUE_PAGE_SIZE)
    expect(page.locator("#count")).to_have_text(str(total + 2))
    expect(page.locator("#off-page")).to_have_text("2 more — next page →")

    # Decided elsewhere: the late one leaves the count and the link, once.
    push("approval.updated", {**late, "status": "approved"})
    push("approval.updated", {**late, "status": "approved"})
    expect(page.locator("#count")).to_have_text(str(total + 1))
    expect(page.locator("#off-page")).to_have_text("1 more — next page →")


def test_a_later_page_keeps_its_own_window_after_the_snapshot(live_stack, logins, browser_page, personas):
    page = browser_page
    total = in_worker_thread(lambda: seed_queue(personas.carol))
    log_in(page, live_stack.url + f"/?offset={QUEUE_PAGE_SIZE}")
    page.wait_for_selector("#approvals[data-synced='1']", state="attached", timeout=10_000)
    expect(page.locator("#approvals li.card")).to_have_count(BEYOND)
    expect(page.locator("#count")).to_have_text(str(total))


def test_an_approval_page_beyond_the_first_page_is_not_taken_for_decided(
    live_stack, logins, browser_page, personas
):
    """The approval page's socket asks for its run's window, so an approval that sorts past
    the reviewer's first page is still found pending in the snapshot."""
    page = browser_page

    def seed_and_one_more() -> tuple[str, str]:
        seed_queue(personas.carol)
        run = run_submit(
            submitter=personas.carol,
            agent="demo",
            input="Later.",
            model={"provider": "scripted", "script": SEND_EMAIL_SCRIPT},
            approval_ttl_seconds=3 * 86400,  # expires after every clone: past the first page
        )
        run_execute(run_id=run.id, worker="in-process")
        return str(run.id), str(run.approvals.get(status="pending").id)

    run_id, approval_id = in_worker_thread(seed_and_one_more)
    sockets: list[str] = []
    page.on("websocket", lambda ws: sockets.append(ws.url))
    log_in(page, live_stack.url + f"/approvals/{approval_id}/")
    expect(page.locator("#approval")).to_have_attribute("data-socket", "live", timeout=10_000)
    assert sockets == [live_stack.url.replace("http", "ws") + f"/ws/desk/?run={run_id}"]
    expect(page.locator("#decided-notice")).to_be_hidden()
    expect(page.locator("#decide-form button").first).to_be_enabled()
