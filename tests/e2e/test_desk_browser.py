"""The desk in headless Chromium: log in, watch an approval arrive live, approve it."""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connections, transaction
from playwright.sync_api import expect

from reviewdesk.accounts.services import token_create
from reviewdesk.events.models import DeskEvent
from reviewdesk.events.services import event_emit
from tests.conftest import SEND_EMAIL_SCRIPT
from tests.e2e.conftest import http, outbox_for, wait_for_run

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

CHROMIUM = "/usr/bin/chromium"
# Chromium's own background traffic is refused by this network; keep it quiet.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture
def logins(personas) -> dict[str, str]:
    """Passwords for the browser and a submit token, set up before Playwright starts:
    inside its event loop an ORM call would open a connection nobody closes."""
    for user in (personas.alice, personas.olivia):
        user.set_password(f"{user.username}-password")
        user.save()
    _, carol_token = token_create(user=personas.carol, scopes=["submit"])
    return {"carol_token": carol_token}


@pytest.fixture
def desk_has_run_a_while(logins) -> None:
    """One event already in the log, so the page's snapshot sequence is an event's, as on a desk
    in use. The suite's earlier tests leave the id sequence far past an empty table's 0, and a
    jump from 0 to the next id is a gap the page rightly replays for."""
    DeskEvent.objects.create(type="run.updated", data={}, audience=[])


@pytest.fixture
def browser_page(logins):
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "install Debian's chromium (.ci/run does it with apt-get)"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page()
        yield page
        browser.close()


def test_a_reviewer_sees_the_approval_arrive_and_approves_it(
    live_stack, logins, desk_has_run_a_while, browser_page, report_timing
):
    page = browser_page
    carol = logins["carol_token"]
    sent: list[str] = []
    received: list[str] = []

    def watch(ws) -> None:
        ws.on("framesent", lambda payload: sent.append(str(payload)))
        ws.on("framereceived", lambda payload: received.append(str(payload)))

    page.on("websocket", watch)

    page.goto(live_stack.url + "/")
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", "alice-password")
    page.click("button[type=submit]")
    page.wait_for_selector("#live[data-state=live]", timeout=10_000)
    assert page.text_content("#count") == "0"

    submitted_at = time.monotonic()
    status, run = http(
        "POST",
        live_stack.url + "/api/v1/runs",
        token=carol,
        body={
            "agent": "demo",
            "input": "Email Ada.",
            "model": {"provider": "scripted", "script": SEND_EMAIL_SCRIPT},
        },
    )
    assert status == 201, run
    card = page.wait_for_selector(f"li.card:has(a[href='/runs/{run['id']}/'])", timeout=15_000)
    shown_at = time.monotonic()
    assert card.query_selector(".tool").text_content() == "send_email"
    assert '"to": "ada@example.com"' in card.query_selector(".args").text_content()
    assert card.query_selector(".reviewer").text_content() == "any reviewer"
    assert card.query_selector(".expires").get_attribute("datetime")
    assert page.text_content("#count") == "1"
    # The desk page's socket skips the run's updates around the approval and vouches for them
    # (`after`), so the page asks for no replay beyond its first, heartbeats included.
    wait_for_run(live_stack, carol, run["id"], "input_required")
    heartbeats = sum('"heartbeat"' in frame for frame in received)
    expect(page.locator("#count")).to_have_text("1")
    page.wait_for_timeout(2_500)  # DESK_WS_HEARTBEAT_SECONDS is 2 under tests
    assert sum('"heartbeat"' in frame for frame in received) > heartbeats
    assert [frame for frame in sent if '"replay"' in frame] == [sent[0]], sent
    assert not [frame for frame in received if '"run.updated"' in frame]
    page.screenshot(path=str(Path(settings.VAR_DIR) / "desk-with-approval.png"), full_page=True)

    # The card is drawn again once its preview's summary is read (the event carries none).
    live_card = page.locator(f"li.card[data-run='{run['id']}']")
    expect(live_card).to_have_attribute("data-summary", "ready")
    live_card.locator("input[name=reason]").fill("right customer, right words")
    asked: list[str] = []
    page.on("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
    live_card.locator("button.approve").click()  # an ordinary email: decided at once
    page.wait_for_selector(".flash.success", timeout=10_000)
    assert "Approved send_email" in page.text_content(".flash.success")
    assert asked == []  # never the browser's window.confirm

    final = wait_for_run(live_stack, carol, run["id"])
    assert final["status"] == "succeeded", final["error"]
    assert [(e["tool"], e["status"]) for e in final["side_effects"]] == [("send_email", "confirmed")]
    assert final["approvals"][0]["decision"]["reviewer"] == "alice"
    assert len(outbox_for(run["id"])) == 1
    # A locator wait: wait_for_function evaluates a string, which the page's CSP rightly forbids.
    expect(page.locator("#count")).to_have_text("0", timeout=10_000)
    report_timing(f"[browser] submit -> card on the desk page: {(shown_at - submitted_at) * 1000:.0f} ms")


def test_an_outsider_cannot_open_the_desk(live_stack, browser_page):
    page = browser_page
    page.goto(live_stack.url + "/accounts/login/")
    page.fill("input[name=username]", "olivia")
    page.fill("input[name=password]", "olivia-password")
    response_holder = {}
    page.on("response", lambda r: response_holder.setdefault(r.url, r.status))
    page.click("button[type=submit]")
    page.wait_for_load_state()
    assert response_holder.get(live_stack.url + "/") == 403


def approval_event_data(tool: str) -> dict:
    return {
        "id": str(uuid.uuid4()),
        "run": str(uuid.uuid4()),
        "tool": tool,
        "arguments": {},
        "arguments_sha256": "0" * 64,
        "reviewer": {"users": [], "targets": [], "group": "reviewers"},
        "expires_at": "2099-01-01T00:00:00Z",
        "checkpoint_id": str(uuid.uuid4()),
        "status": "pending",
    }


def in_worker_thread(fn):
    """Run `fn` off Playwright's event loop, where the ORM refuses to run, and close its connection."""

    def call():
        try:
            return fn()
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(call).result()


def test_a_push_lost_before_the_next_one_shows_up_without_a_reload(live_stack, logins, browser_page):
    page = browser_page
    page.goto(live_stack.url + "/")
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", "alice-password")
    page.click("button[type=submit]")
    page.wait_for_selector("#live[data-state=live]", timeout=10_000)
    lost, pushed = approval_event_data("lost_tool"), approval_event_data("pushed_tool")

    def commit_two_and_push_only_the_second():
        with transaction.atomic():
            DeskEvent.objects.create(type="approval.created", data=lost)  # its push "dropped"
            event_emit(type="approval.created", data=pushed)

    in_worker_thread(commit_two_and_push_only_the_second)
    page.wait_for_selector(f"li.card[data-approval-id='{pushed['id']}']", timeout=10_000)
    # The second push is the latest, so no heartbeat would ever ask again: only the gap can.
    page.wait_for_selector(f"li.card[data-approval-id='{lost['id']}']", timeout=6_000)
    assert page.text_content("#count") == "2"
