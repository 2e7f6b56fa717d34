"""The run page's timeline grows live in headless Chromium, against daphne and a Celery worker:
a decision made elsewhere (the API) and the worker's finishing the run reach an open run page
through the desk socket, without a reload."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from reviewdesk.accounts.services import token_create
from tests.conftest import SEND_EMAIL_SCRIPT
from tests.e2e.conftest import http, wait_for_run
from tests.e2e.test_desk_review import browser, log_in, shoot, submit  # noqa: F401

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def tokens(personas) -> tuple[str, str]:
    """Carol's submit token and bob's review token; alice's password for the browser.
    (Made before the browser starts: Playwright's loop would make these calls async-unsafe.)"""
    personas.alice.set_password("alice-password")
    personas.alice.save()
    return (
        token_create(user=personas.carol, scopes=["submit"])[1],
        token_create(user=personas.bob, scopes=["review"])[1],
    )


def test_the_run_timeline_grows_live_as_bob_approves_and_the_worker_finishes(
    own_stack,
    tokens,
    browser,  # noqa: F811
):
    carol, bob = tokens
    run_id = submit(own_stack, carol, SEND_EMAIL_SCRIPT)
    approval = wait_for_run(own_stack, carol, run_id, "input_required")["approvals"][0]

    page = log_in(browser, own_stack, "alice", f"/runs/{run_id}/")
    page.wait_for_selector("#timeline-live[data-state=live]")
    expect(page.locator("#cancel-run")).to_be_visible()
    before = page.locator("#timeline-list .tl-text").all_text_contents()
    assert before[0] == "Run submitted" and "Approval requested: send_email" in before
    assert "Run succeeded" not in before

    status, body = http(
        "POST",
        f"{own_stack.url}/api/v1/approvals/{approval['id']}/decision",
        token=bob,
        body={"verdict": "approve", "checkpoint_id": approval["checkpoint_id"]},
    )
    assert status == 201, body
    wait_for_run(own_stack, carol, run_id, "succeeded")  # the worker finished: now the page must show it
    expect(
        page.locator("#timeline-list .tl-text", has_text=re.compile(r"^\s*Run succeeded\s*$"))
    ).to_have_count(1, timeout=60_000)
    after = page.locator("#timeline-list .tl-text").all_text_contents()
    assert after[: len(before)] == before  # it grew; nothing earlier moved
    for text in ("Approved send_email", "Effect send_email confirmed", "Run succeeded"):
        assert text in after[len(before) :], after
    assert page.text_content("#run-status") == "succeeded"  # from the same fetch as the timeline
    expect(page.locator("#cancel-run")).to_have_count(0)  # and so are its controls: nothing to cancel
    assert int(page.get_attribute("#timeline", "data-event-refreshes") or 0) >= 1  # pushed, not polled
    assert page.evaluate("performance.getEntriesByType('navigation').length") == 1  # no reload
    shoot(page, "run-timeline")
