"""Issue 38 on the desk, in headless Chromium against daphne and a Celery worker: a card whose
recipient came only from an untrusted tool's output shows where each argument came from and
warns; "select all similar" leaves it out and the batch's confirmation names the warning; a
second opinion arrives live on an open desk and an open approval page (stored and announced as
approval.updated, as the reading task does) and a high one's confirmation states its concerns; the queue sorts risk
first and filters by reading, live and on a reload.

The provenance engine and the reading task land from other branches: here each call's stored
provenance and reading are set on the raised approval, and the reading is announced through the
real socket path (the event log, the channel layer, daphne, the page's socket)."""

from __future__ import annotations

import pytest
from django.db import transaction
from playwright.sync_api import expect

from agents.provenance import source_label
from reviewdesk.approvals.access import approval_audience
from reviewdesk.approvals.models import ApprovalRequest
from reviewdesk.approvals.reads.representation import approval_data
from reviewdesk.events.services import event_emit
from tests.e2e.conftest import wait_for_run
from tests.e2e.test_desk_batch import email_script
from tests.e2e.test_desk_browser import in_worker_thread
from tests.e2e.test_desk_review import browser, card_for, carol_token, log_in, submit  # noqa: F401

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

FROM_INBOX = {
    "kind": "tool_output",
    "match": "exact",
    "step": 3,
    "tool": "read_inbox",
    "call_id": "c1",
    "trusted": False,
}
FROM_TASK = {"kind": "task", "match": "exact", "step": 1}
UNTRUSTED_TO = {
    "pointer": "/to",
    "code": "untrusted_origin",
    "text": "/to came only from read_inbox's output at step 3 (untrusted)",
}
HIGH = {
    "status": "ready",
    "model": "reviewer-model",
    "risk": "high",
    "summary": "Emails a refund notice to an address an inbound email gave.",
    "concerns": [{"about": "/to", "text": "the recipient came from an inbound email, not the task"}],
    "at": "2026-12-07T10:00:00Z",
}


def raised_call(stack, token: str, to: str) -> tuple[str, str]:
    """A send_email waiting on the desk: (run id, approval id)."""
    run_id = submit(stack, token, email_script(to))
    run = wait_for_run(stack, token, run_id, "input_required")
    return run_id, run["approvals"][0]["id"]


def set_provenance(approval_id: str, flags: list[dict]) -> None:
    def store():
        approval = ApprovalRequest.objects.get(pk=approval_id)
        sources = {"/to": [FROM_INBOX], "/subject": [FROM_TASK], "/body": [{"kind": "none"}]}
        approval.provenance = {"sources": sources, "flags": flags}
        approval.save(update_fields=["provenance", "updated_at"])

    in_worker_thread(store)


def announce_reading(approval_id: str, reading: dict) -> None:
    """Store a reading and announce it as the reading task does: one approval.updated with the
    approval's payload, to its audience, pushed once the transaction commits."""

    def store():
        with transaction.atomic():
            approval = ApprovalRequest.objects.select_for_update().get(pk=approval_id)
            approval.reading = reading
            approval.save(update_fields=["reading", "updated_at"])
            event_emit(
                type="approval.updated",
                data=approval_data(approval),
                run_id=approval.run_id,
                audience=approval_audience(approval),
            )

    in_worker_thread(store)


def select(page, run_id: str):
    """Click the card's row (selecting it shows its detail beside the queue)."""
    card = page.locator(f"li.card[data-run='{run_id}']")
    card.locator(".row .tool").click()
    expect(card).to_have_attribute("aria-current", "true")
    return card


def test_an_untrusted_recipient_is_labelled_warned_left_out_of_all_similar_and_named_in_the_batch(
    live_stack,
    carol_token,  # noqa: F811
    browser,  # noqa: F811
):
    ordinary = [raised_call(live_stack, carol_token, f"{name}@example.com")[0] for name in ("ada", "grace")]
    flagged_run, flagged_id = raised_call(live_stack, carol_token, "ada@example.com")
    set_provenance(flagged_id, [UNTRUSTED_TO])
    page = log_in(browser, live_stack, "alice")
    for run_id in [*ordinary, flagged_run]:
        card_for(page, run_id)
    page.wait_for_selector("#approvals[data-synced='1']", timeout=20_000)

    card = select(page, flagged_run)
    expect(card.locator(".risk-line")).to_contain_text(UNTRUSTED_TO["text"])
    expect(card.locator(".what .warnings")).to_contain_text("⚠ " + UNTRUSTED_TO["text"])
    to = card.locator("dl.provenance dd").first
    expect(card.locator("dl.provenance dt").first).to_have_text("/to")
    expect(to.locator(".arg-value")).to_have_text("ada@example.com")
    expect(to.locator(".source")).to_have_text("⚠ " + source_label(FROM_INBOX))
    expect(to).to_have_class("arg flagged")
    expect(card.locator("dl.provenance dd .source").nth(1)).to_have_text(source_label(FROM_TASK))

    # "All similar" from an ordinary email: the two ordinary ones, never the flagged one.
    select(page, ordinary[0])
    page.keyboard.press("Shift+A")
    for run_id in ordinary:
        expect(page.locator(f"li.card[data-run='{run_id}']")).to_have_attribute("data-picked", "yes")
    expect(page.locator(f"li.card[data-run='{flagged_run}']")).not_to_have_attribute("data-picked", "yes")
    expect(page.locator("#notices")).to_contain_text("1 similar send_email call was left out")
    expect(page.locator("#batch-count")).to_have_text("2 selected")

    # Picked by hand, it is in the batch, and the confirmation names its warning in red.
    page.check(f"li.card[data-run='{flagged_run}'] input.batch-pick")
    expect(page.locator("#batch-count")).to_have_text("3 selected")
    page.click("#batch-approve")
    confirm = page.locator("dialog#confirm")
    expect(confirm).to_be_visible()
    items = confirm.locator("#confirm-items > li")
    expect(items).to_have_count(3)
    expect(items.nth(2).locator(".warning")).to_have_text("⚠ " + UNTRUSTED_TO["text"])
    expect(items.nth(0).locator(".warning")).to_have_count(0)
    expect(page.locator("#confirm-cancel")).to_be_focused()
    page.click("#confirm-cancel")
    expect(confirm).to_be_hidden()


def test_a_reading_arrives_live_and_a_high_one_asks_first_stating_its_concerns(
    live_stack,
    carol_token,  # noqa: F811
    browser,  # noqa: F811
):
    run_id, approval_id = raised_call(live_stack, carol_token, "ada@example.com")
    set_provenance(approval_id, [])
    page = log_in(browser, live_stack, "alice")
    card_for(page, run_id)
    page.wait_for_selector("#approvals[data-synced='1']", timeout=20_000)
    card = select(page, run_id)
    expect(card.locator(".reading-line")).to_have_count(0)
    expect(card.locator("section.reading")).to_have_count(0)

    announce_reading(approval_id, {**HIGH, "status": "pending", "risk": None, "summary": "", "concerns": []})
    card = page.locator(f"li.card[data-run='{run_id}']")
    expect(card.locator(".reading-line")).to_have_text("2nd opinion: being read…")
    expect(card.locator("section.reading .reading-risk")).to_have_text("being read…")
    expect(card.locator("section.reading .asks-head")).to_have_text(
        "Second opinion model output, advice only"
    )

    announce_reading(approval_id, HIGH)
    expect(card.locator(".reading-line")).to_have_text("2nd opinion: high risk")
    reading = card.locator("section.reading")
    expect(reading).to_have_attribute("data-level", "high")
    expect(reading.locator(".reading-risk")).to_have_text("high risk")
    expect(reading.locator(".reading-summary")).to_have_text(HIGH["summary"])
    concern = reading.locator(".concerns li a")
    expect(concern).to_have_text("/to")
    expect(concern).to_have_attribute("href", f"#arg-{approval_id}-0")
    expect(card).to_have_attribute("aria-current", "true")  # still the selected card

    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.keyboard.press("a")
    confirm = page.locator("dialog#confirm")
    expect(confirm).to_be_visible()
    expect(confirm.locator(".warning")).to_have_text(
        "⚠ A second opinion (model output) reads this as high risk: "
        "/to: the recipient came from an inbound email, not the task"
    )
    page.click("#confirm-ok")
    expect(page.locator(f"li.card[data-run='{run_id}']")).to_have_count(0, timeout=20_000)
    assert wait_for_run(live_stack, carol_token, run_id)["status"] == "succeeded"
    assert dialogs == []

    # The approval page, open when the reading arrives, draws it and asks the same question.
    _, other_id = raised_call(live_stack, carol_token, "grace@example.com")
    set_provenance(other_id, [])
    page.goto(f"{live_stack.url}/approvals/{other_id}/")
    page.wait_for_selector("#approval[data-socket='live']", timeout=20_000)
    expect(page.locator("#beside-call section.reading")).to_have_count(0)
    announce_reading(other_id, HIGH)
    expect(page.locator("#beside-call section.reading .reading-risk")).to_have_text("high risk")
    expect(page.locator("#beside-call section.reading .concerns a")).to_have_attribute("href", "#arg-0")
    expect(page.locator("#beside-call dl.provenance dd").first.locator(".source")).to_have_text(
        source_label(FROM_INBOX)
    )
    page.click("#decide-form button.approve")
    expect(page.locator("dialog#confirm .warning")).to_contain_text("reads this as high risk")
    page.click("#confirm-cancel")


def order(page) -> list[str]:
    return [card.get_attribute("data-run") for card in page.locator("li.card").all()]


def test_risk_first_and_the_reading_filter_follow_readings_as_they_arrive(
    live_stack,
    carol_token,  # noqa: F811
    browser,  # noqa: F811
):
    calls = [raised_call(live_stack, carol_token, f"{name}@example.com") for name in ("ada", "grace", "bea")]
    runs = [run_id for run_id, _ in calls]
    page = log_in(browser, live_stack, "alice", "/?sort=risk")
    for run_id in runs:
        card_for(page, run_id)
    page.wait_for_selector("#approvals[data-synced='1']", timeout=20_000)
    expect(page.locator("#sort-hint")).to_contain_text("risk first")
    assert order(page) == runs  # no readings yet: the usual order

    announce_reading(calls[2][1], {**HIGH, "risk": "medium"})
    expect(page.locator("li.card").first).to_have_attribute("data-run", runs[2])
    announce_reading(calls[1][1], HIGH)
    expect(page.locator("li.card").first).to_have_attribute("data-run", runs[1])
    expect(page.locator("li.card").nth(1)).to_have_attribute("data-run", runs[2])
    # A failed reading is no low one: it ranks with the medium ones (sooner to expire, first).
    announce_reading(calls[0][1], {**HIGH, "status": "unavailable", "risk": None, "error": "timed out"})
    expect(page.locator(f"li.card[data-run='{runs[0]}'] .reading-line")).to_have_text(
        "2nd opinion: unavailable"
    )
    expect(page.locator("li.card").nth(1)).to_have_attribute("data-run", runs[0])
    assert order(page) == [runs[1], runs[0], runs[2]]
    page.reload()
    page.wait_for_selector("#approvals[data-synced='1']", timeout=20_000)
    assert order(page) == [runs[1], runs[0], runs[2]]  # the server's page agrees

    page.goto(live_stack.url + "/?reading=high")
    page.wait_for_selector("#approvals[data-synced='1']", timeout=20_000)
    assert order(page) == [runs[1]]
    announce_reading(calls[0][1], HIGH)  # read again, high: it joins the filtered page
    expect(page.locator(f"li.card[data-run='{runs[0]}']")).to_have_count(1)
    announce_reading(calls[1][1], {**HIGH, "risk": "low"})  # and one read low leaves it
    expect(page.locator(f"li.card[data-run='{runs[1]}']")).to_have_count(0)
    assert order(page) == [runs[0]]
    page.goto(live_stack.url + "/?reading=medium")
    page.wait_for_selector("#approvals[data-synced='1']", timeout=20_000)
    assert sorted(order(page)) == sorted([runs[0], runs[2]])
