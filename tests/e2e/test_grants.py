"""Standing grants on real processes (daphne, a Celery worker on Redis): a grant is used exactly
up to its limit and then a human is asked again; revoking a grant while its run is running
stops it at the very next call; a revoked grant whose row a database writer cleared stays
revoked for the worker."""

from __future__ import annotations

import pytest

from reviewdesk.accounts.services import token_create
from tests.e2e.conftest import get_run, http, outbox_for, wait_for_run, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

EMAIL = {"to": "ada@example.com", "subject": "Your refund", "body": "It is on its way."}
ONE_EMAIL = [{"tool_calls": [{"name": "send_email", "arguments": EMAIL}]}, {"content": "Emailed Ada."}]


def submit(stack, token: str, model: dict) -> str:
    status, run = http(
        "POST",
        stack.url + "/api/v1/runs",
        token=token,
        body={"agent": "demo", "input": "Tell Ada.", "model": model},
    )
    assert status == 201, run
    return run["id"]


def pending_approval(stack, token: str, run_id: str) -> dict:
    run = wait_for_run(stack, token, run_id, "input_required")
    (approval,) = [a for a in run["approvals"] if a["status"] == "pending"]
    return approval


def approve(stack, token: str, approval: dict, grant: dict | None = None) -> dict:
    body = {"verdict": "approve", "checkpoint_id": approval["checkpoint_id"]}
    if grant is not None:
        body["grant"] = grant
    status, decision = http(
        "POST", f"{stack.url}/api/v1/approvals/{approval['id']}/decision", token=token, body=body
    )
    assert status == 201, decision
    return decision


def the_grant(stack, token: str, grant_id: str) -> dict:
    status, page = http("GET", f"{stack.url}/api/v1/grants?limit=200", token=token)
    assert status == 200, page
    return next(g for g in page["results"] if g["id"] == grant_id)


def test_a_grant_is_used_exactly_up_to_its_limit_then_a_human_is_asked_again(live_stack, personas):
    _, carol = token_create(user=personas.carol, scopes=["submit"])
    _, alice = token_create(user=personas.alice, scopes=["review"])
    scripted = {"provider": "scripted", "script": ONE_EMAIL}

    first = submit(live_stack, carol, scripted)
    decision = approve(
        live_stack, alice, pending_approval(live_stack, carol, first), {"scope": "agent", "max_uses": 2}
    )
    grant_id = decision["grant"]["id"]
    assert wait_for_run(live_stack, carol, first)["status"] == "succeeded"

    for use in (1, 2):  # no one is asked: the worker's gate verifies the grant and counts the use
        run_id = submit(live_stack, carol, scripted)
        run = wait_for_run(live_stack, carol, run_id)
        assert run["status"] == "succeeded", run["error"]
        assert run["approvals"] == []
        assert len(outbox_for(run_id)) == 1
        assert the_grant(live_stack, alice, grant_id)["uses"] == use

    third = submit(live_stack, carol, scripted)
    approval = pending_approval(live_stack, carol, third)  # used up: a human again
    assert approval["tool"] == "send_email" and outbox_for(third) == []
    grant = the_grant(live_stack, alice, grant_id)
    assert grant["uses"] == 2 and grant["status"] == "used_up"
    approve(live_stack, alice, approval)
    assert wait_for_run(live_stack, carol, third)["status"] == "succeeded"


def test_revoking_a_grant_mid_run_stops_it_at_the_next_call(live_stack, personas, llm_server):
    from tests.llm_server import calls, slow, text

    _, carol = token_create(user=personas.carol, scopes=["submit"])
    _, alice = token_create(user=personas.alice, scopes=["review"])
    # One run, four emails in a row; the third model reply is slow, so the test can revoke
    # the grant while the run is still running on the worker.
    llm_server.script(
        calls(("send_email", EMAIL)),
        calls(("send_email", EMAIL)),
        slow(4, calls(("send_email", EMAIL))),
        text("Done."),
    )
    run_id = submit(live_stack, carol, {"provider": "openai", "name": "m"})
    decision = approve(
        live_stack, alice, pending_approval(live_stack, carol, run_id), {"scope": "run", "max_uses": 10}
    )
    grant_id = decision["grant"]["id"]
    wait_until(
        lambda: the_grant(live_stack, alice, grant_id)["uses"] == 1,
        timeout=20,
        what="the second email to run under the grant",
        interval=0.1,
    )
    assert get_run(live_stack, carol, run_id)["status"] == "running"
    status, revoked = http("POST", f"{live_stack.url}/api/v1/grants/{grant_id}/revoke", token=alice)
    assert status == 200 and revoked["status"] == "revoked", revoked

    approval = pending_approval(live_stack, carol, run_id)  # the third email asks a human
    assert approval["tool"] == "send_email"
    assert the_grant(live_stack, alice, grant_id)["uses"] == 1
    assert len(outbox_for(run_id)) == 2
    approve(live_stack, alice, approval)
    final = wait_for_run(live_stack, carol, run_id)
    assert final["status"] == "succeeded", final["error"]
    assert len(outbox_for(run_id)) == 3


def test_a_revoked_grant_whose_row_a_database_writer_cleared_still_asks_a_human(live_stack, personas):
    """The review's attack, on real processes: revoke through the API, then clear the grant's
    row with a plain UPDATE (`revoked_at`, and the signed copy the row keeps). The row says the
    grant is live, yet the next matching email waits for a reviewer: the worker found the
    revocation the web process pinned in the revocations file, and it verifies."""
    from reviewdesk.approvals.models import Grant

    _, carol = token_create(user=personas.carol, scopes=["submit"])
    _, alice = token_create(user=personas.alice, scopes=["review"])
    scripted = {"provider": "scripted", "script": ONE_EMAIL}
    first = submit(live_stack, carol, scripted)
    decision = approve(
        live_stack, alice, pending_approval(live_stack, carol, first), {"scope": "agent", "max_uses": 5}
    )
    grant_id = decision["grant"]["id"]
    assert wait_for_run(live_stack, carol, first)["status"] == "succeeded"
    status, revoked = http("POST", f"{live_stack.url}/api/v1/grants/{grant_id}/revoke", token=alice)
    assert status == 200 and revoked["status"] == "revoked", revoked

    cleared = Grant.objects.filter(pk=grant_id).update(
        revoked_at=None, revoked_by=None, revocation=None, revocation_signature=""
    )
    assert cleared == 1 and the_grant(live_stack, alice, grant_id)["status"] == "live"

    second = submit(live_stack, carol, scripted)
    approval = pending_approval(live_stack, carol, second)
    assert approval["tool"] == "send_email" and outbox_for(second) == []
    assert the_grant(live_stack, alice, grant_id)["uses"] == 0


def test_a_reviewer_grants_from_the_approval_page_with_the_g_key_and_the_grants_page_revokes_it(
    live_stack, personas
):
    """Chromium against daphne and the worker: `g` opens the grant fields, Approve signs the
    decision and a pattern grant, the next matching run asks no one, and Revoke on /grants/
    makes the next one ask again."""
    from playwright.sync_api import expect

    from tests.e2e.test_desk_review import log_in

    personas.alice.set_password("alice-password")
    personas.alice.save()
    _, carol = token_create(user=personas.carol, scopes=["submit"])
    scripted = {"provider": "scripted", "script": ONE_EMAIL}
    run_id = submit(live_stack, carol, scripted)
    approval = pending_approval(live_stack, carol, run_id)

    from playwright.sync_api import sync_playwright

    from tests.e2e.test_desk_browser import CHROMIUM, CHROMIUM_ARGS

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = log_in(browser, live_stack, "alice", f"/approvals/{approval['id']}/")
            natives: list[str] = []
            page.on("dialog", lambda dialog: (natives.append(dialog.message), dialog.dismiss()))
            page.keyboard.press("g")
            expect(page.locator("#grant-on")).to_be_checked()
            page.check("input[name=grant_match][value=constraints]")
            page.fill("#grant-constraints", '{"to": {"endswith": "@example.com"}}')
            page.select_option("#grant-scope", "agent")
            page.fill("#grant-max-uses", "5")
            page.click("#decide-form button.approve")  # an ordinary email: nothing asks
            page.wait_for_load_state()
            assert wait_for_run(live_stack, carol, run_id)["status"] == "succeeded"
            assert natives == []

            second = submit(live_stack, carol, scripted)
            run = wait_for_run(live_stack, carol, second)
            assert run["status"] == "succeeded" and run["approvals"] == []

            page.goto(live_stack.url + "/grants/")
            row = page.locator("#grants tbody tr").first
            expect(row.locator(".uses")).to_have_text("1 of 5")
            expect(row.locator(".constraints")).to_contain_text("@example.com")
            row.locator("button", has_text="Revoke").click()
            page.wait_for_load_state()
            expect(page.locator("#grants tbody tr").first.locator(".status")).to_have_text("revoked")
        finally:
            browser.close()

    third = submit(live_stack, carol, scripted)
    assert pending_approval(live_stack, carol, third)["tool"] == "send_email"
