"""Quorum and hand-over on real processes (daphne, a Celery worker on Redis, headless Chromium).

Quorum: execute needs two reviewers. Two reviewers on two approval pages: one approval is not
enough, the second page and a third reviewer's desk show "1 of 2" live, and the worker runs the
command only after the second approval. Hand-over: the card moves to the colleague's open desk."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect

from reviewdesk.accounts.services import token_create
from tests.e2e.conftest import get_run, http, wait_for_run
from tests.e2e.test_desk_browser import CHROMIUM, CHROMIUM_ARGS

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SCRIPT = [
    {"tool_calls": [{"name": "execute", "arguments": {"command": "echo four-eyes"}}]},
    {"content": "Ran it."},
]


@pytest.fixture
def two_reviewers(personas):
    """alice's and bob's passwords and carol's token, set up before Playwright starts."""
    for user in (personas.alice, personas.bob, personas.admin):
        user.set_password(f"{user.username}-password")
        user.save()
    _, carol = token_create(user=personas.carol, scopes=["submit"])
    return carol


@pytest.fixture
def three_pages():
    """Three browser contexts, each with its own session: two reviewers' approval pages and a
    third reviewer's desk."""
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "install Debian's chromium (.ci/run does it with apt-get)"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield tuple(browser.new_context().new_page() for _ in range(3))
        browser.close()


def log_in(page, url: str, username: str, path: str) -> None:
    page.goto(f"{url}/accounts/login/?next={path}")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", f"{username}-password")
    page.click("button[type=submit]")


def open_as(page, url: str, username: str, path: str) -> None:
    log_in(page, url, username, path)
    expect(page.locator("#approval")).to_have_attribute("data-socket", "live", timeout=10_000)


def test_two_reviewers_on_two_pages_approve_execute_and_only_then_it_runs(
    live_stack, two_reviewers, three_pages
):
    carol = two_reviewers
    alice_page, bob_page, desk_page = three_pages
    status, run = http(
        "POST",
        live_stack.url + "/api/v1/runs",
        token=carol,
        body={"agent": "demo", "input": "Run it.", "model": {"provider": "scripted", "script": SCRIPT}},
    )
    assert status == 201, run
    waiting = wait_for_run(live_stack, carol, run["id"], "input_required")
    (approval,) = waiting["approvals"]
    assert approval["quorum"] == {"required": 2, "approved_by": [], "groups": []}
    path = f"/approvals/{approval['id']}/"

    log_in(desk_page, live_stack.url, "admin", "/")
    expect(desk_page.locator("#live")).to_have_attribute("data-state", "live", timeout=10_000)
    card = desk_page.locator(f"li.card[data-approval-id='{approval['id']}']")
    expect(card.locator(".quorum")).to_have_text("0 of 2")
    open_as(alice_page, live_stack.url, "alice", path)
    open_as(bob_page, live_stack.url, "bob", path)
    for page in (alice_page, bob_page):
        expect(page.locator("#quorum-count")).to_have_text("0 of 2")
        expect(page.locator("#edit-link")).to_have_count(0)  # no edit under a quorum
    # bob's socket is live before alice votes, so what reaches it below is a push.
    expect(bob_page.locator("#approval")).to_have_attribute("data-socket", "live", timeout=10_000)

    natives: list[str] = []  # the browser's own dialogs: none (the page asks in #confirm)
    for page in (alice_page, bob_page):
        page.on("dialog", lambda dialog: (natives.append(dialog.message), dialog.dismiss()))
    alice_page.click("#decide-form button.approve")  # the first vote: nothing unusual, nothing asks
    expect(alice_page.locator(".flash.success")).to_contain_text("1 of 2, waiting for another reviewer")

    # bob's page hears alice's vote over the socket, without a reload.
    expect(bob_page.locator("#quorum-count")).to_have_text("1 of 2", timeout=10_000)
    expect(bob_page.locator("#quorum-by")).to_have_text("approved by alice")
    # ...and so does the card on a third reviewer's desk.
    expect(card.locator(".quorum")).to_have_text("1 of 2", timeout=10_000)

    # One approval is not enough: the worker was given nothing to run. Not judged after a pause
    # (a resume arriving after it would pass): the attempts the run ends with, below, show that
    # no worker took the run between the two votes.
    after_one = get_run(live_stack, carol, run["id"])
    assert after_one["status"] == "input_required"
    assert after_one["side_effects"] == []
    assert after_one["approvals"][0]["status"] == "pending"

    # bob's is the last vote, which runs the command: the page asks first, saying so.
    bob_page.click("#decide-form button.approve")
    expect(bob_page.locator("#confirm .warning")).to_contain_text(
        "yours is the last of 2 approvals: approving runs it"
    )
    bob_page.click("#confirm-ok")
    expect(bob_page.locator(".flash.success")).to_contain_text("Approved execute")
    assert natives == []

    final = wait_for_run(live_stack, carol, run["id"], "succeeded", "failed")
    expect(card).to_have_count(0, timeout=10_000)  # decided: it leaves the desk
    assert final["status"] == "succeeded", final["error"]
    (effect,) = final["side_effects"]
    assert (effect["tool"], effect["status"], effect["result"]["stdout"]) == (
        "execute",
        "confirmed",
        "four-eyes\n",
    )
    (decided,) = final["approvals"]
    assert decided["status"] == "approved"
    assert decided["quorum"]["approved_by"] == ["alice", "bob"]
    assert decided["decision"]["reviewer"] == "bob"
    assert effect["decision"] == decided["decision"]["id"]
    # Every attempt after the one that raised the request began after bob's vote: alice's
    # vote alone had the run claimed by no worker (a claim is an attempt, even one that ran
    # nothing), so nothing could have run on one approval.
    later = final["attempts"][len(after_one["attempts"]) :]
    assert later, final["attempts"]
    bobs_vote = decided["decision"]["decided_at"]  # sortable RFC 3339, as the attempts' times
    assert all(a["started_at"] >= bobs_vote for a in later), (bobs_vote, final["attempts"])


def test_a_hand_over_in_the_browser_moves_the_card_to_the_colleagues_desk_live(
    live_stack, two_reviewers, three_pages
):
    """alice hands an item assigned to her to bob from its page (key `h`); bob's open desk
    gets the card without a reload, with her note, and counts it (the count stayed at 0: the
    page took a call it had not seen for one already in its count); it is off alice's desk."""
    from tests.conftest import SEND_EMAIL_SCRIPT

    carol = two_reviewers
    alice_page, bob_desk, _ = three_pages
    log_in(bob_desk, live_stack.url, "bob", "/")
    expect(bob_desk.locator("#live")).to_have_attribute("data-state", "live", timeout=10_000)
    status, run = http(
        "POST",
        live_stack.url + "/api/v1/runs",
        token=carol,
        body={
            "agent": "demo",
            "input": "Email Ada.",
            "reviewers": ["alice"],
            "model": {"provider": "scripted", "script": SEND_EMAIL_SCRIPT},
        },
    )
    assert status == 201, run
    (approval,) = wait_for_run(live_stack, carol, run["id"], "input_required")["approvals"]
    card = bob_desk.locator(f"li.card[data-approval-id='{approval['id']}']")
    expect(card).to_have_count(0)  # alice's, not bob's
    expect(bob_desk.locator("#count")).to_have_text("0")

    open_as(alice_page, live_stack.url, "alice", f"/approvals/{approval['id']}/")
    alice_page.keyboard.press("h")
    expect(alice_page.locator("#handover-form input[name=to]")).to_be_focused()
    alice_page.fill("#handover-form input[name=to]", "bob")
    alice_page.fill("#handover-form input[name=note]", "you wrote to her last week")
    alice_page.click("#handover-submit")
    expect(alice_page.locator(".flash.success")).to_contain_text("over to bob")
    expect(alice_page.locator(f"li.card[data-approval-id='{approval['id']}']")).to_have_count(0)

    expect(card).to_have_count(1, timeout=10_000)
    expect(card.locator(".reviewer")).to_have_text("bob")
    expect(card.locator(".handover")).to_have_text("alice: “you wrote to her last week”")
    expect(bob_desk.locator("#count")).to_have_text("1")
    expect(bob_desk).to_have_title("(1) Desk · Review Desk")
