"""The audit page in headless Chromium, against daphne and a Celery worker: the chain's line
says what was checked now, what beat's sweep walked and when, and when the chain was checked in full, the admin filters by actor and action, the filters
stay in the URL, and the CSV export holds exactly the rows the page shows."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import pytest
from django.core.management import call_command

from reviewdesk.accounts.services import token_create
from reviewdesk.audit.sweep import audit_sweep
from reviewdesk.audit.verification import audit_anchor
from tests.conftest import SEND_EMAIL_SCRIPT
from tests.e2e.conftest import http, wait_for_run
from tests.e2e.test_desk_review import browser, log_in, shoot, submit  # noqa: F401
from tests.e2e.test_device_keys import off_the_loop

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def tokens(personas) -> tuple[str, str, str]:
    """carol submits; bob and alice decide over the API; the admin signs in to the page."""
    personas.admin.set_password("admin-password")
    personas.admin.save()
    return (
        token_create(user=personas.carol, scopes=["submit"])[1],
        token_create(user=personas.bob, scopes=["review"])[1],
        token_create(user=personas.alice, scopes=["review"])[1],
    )


def decide(stack, token: str, approval: dict, verdict: str) -> None:
    status, body = http(
        "POST",
        f"{stack.url}/api/v1/approvals/{approval['id']}/decision",
        token=token,
        body={"verdict": verdict, "checkpoint_id": approval["checkpoint_id"], "reason": "checked"},
    )
    assert status == 201, body


def test_the_admin_filters_the_audit_by_actor_and_action_and_exports_what_the_page_shows(
    live_stack,
    tokens,
    browser,  # noqa: F811
):
    carol, bob, alice = tokens
    approved_run, rejected_run = (submit(live_stack, carol, SEND_EMAIL_SCRIPT) for _ in range(2))
    approved = wait_for_run(live_stack, carol, approved_run, "input_required")["approvals"][0]
    rejected = wait_for_run(live_stack, carol, rejected_run, "input_required")["approvals"][0]
    decide(live_stack, bob, approved, "approve")
    decide(live_stack, alice, rejected, "reject")
    # Both runs end (each writes its row) before the chain is anchored and swept, so the page
    # reads a quiet chain: a row written after the sweep would leave its lap under way.
    for run_id in (approved_run, rejected_run):
        wait_for_run(live_stack, carol, run_id, "succeeded")
    # Beat's three audit tasks, in this process (the stack runs no beat): an anchor over the
    # head, the full check and a sweep, recorded where the web process reads them (the same var/).
    assert off_the_loop(audit_anchor).intact
    off_the_loop(lambda: call_command("verify_audit", "--record"))
    assert off_the_loop(audit_sweep).intact

    page = log_in(browser, live_stack, "admin", "/audit/")
    page.wait_for_selector("#chain-status")
    assert page.get_attribute("#chain-status", "class") == "flash success"
    when = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"
    assert re.fullmatch(
        rf"Hash chain intact: (?:the [\d,]+ rows? since the last anchor \(row \d+ at {when}\)|"
        rf"the last anchor \(row \d+ at {when}\), with no row since,) checked now; "
        rf"rows \d+\u2013\d+ swept at {when} \(every row to row \d+ swept since {when}\); "
        rf"the whole chain \([\d,]+ rows\) checked in full at {when}\.",
        page.text_content("#chain-status").strip(),
    ), page.text_content("#chain-status")
    shoot(page, "audit-chain")
    page.fill("#filter-actor", "bob")
    page.fill("#filter-action", "decision.")
    page.click("#audit-filters button[type=submit]")
    page.wait_for_url("**/audit/?*actor=bob*")
    assert "action=decision." in page.url

    cells = page.eval_on_selector_all(
        "#audit tbody tr", "rows => rows.map(r => [...r.cells].map(c => c.innerText.trim()))"
    )
    assert cells and all(row[2] == "bob" and row[3].startswith("decision.") for row in cells), cells
    assert all("signature valid" in row[5] for row in cells if row[3] == "decision.recorded"), cells
    shoot(page, "audit-filtered")

    page.reload()  # the filters live in the URL
    assert page.input_value("#filter-actor") == "bob" and page.input_value("#filter-action") == "decision."

    with page.expect_download() as download:
        page.click("#export-csv")
    exported = list(csv.reader(io.StringIO(Path(download.value.path()).read_text(encoding="utf-8"))))
    header, rows = exported[0], exported[1:]
    actor, action = header.index("actor"), header.index("action")
    assert [(r[0], r[actor], r[action]) for r in rows] == [(row[0], row[2], row[3]) for row in cells]
