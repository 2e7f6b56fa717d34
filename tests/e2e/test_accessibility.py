"""axe-core (axe-playwright-python, its axe.min.js from the wheel: nothing downloaded) on the
desk, the Questions tab, the approval page of a call and of a question, the run page, the runs
list, the grants, settings, tokens, webhooks, keys and API docs pages, and an admin's audit and
MCP pages, and the login page, in headless Chromium against daphne and a Celery worker, each at
1280 and 390 px wide: no violation of any impact on any of them. The desk's selected card and
the call's page carry where each argument came from (a flag among them) and a high second
opinion. Each page is also photographed at 1280 px and at phone width under var/screenshots/,
and axe's findings per page are written next to them (axe-<page>.json)."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from axe_playwright_python.sync_playwright import Axe

from reviewdesk.accounts.services import token_create
from tests.conftest import SEND_EMAIL_SCRIPT
from tests.e2e.conftest import wait_for_run
from tests.e2e.test_desk_provenance import HIGH, UNTRUSTED_TO, announce_reading, select, set_provenance
from tests.e2e.test_desk_review import SHOTS, browser, card_for, log_in, shoot, submit  # noqa: F401
from tests.reviewdesk.desk.test_review_context import REFUND_SCRIPT

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

QUESTION_SCRIPT = [
    {
        "tool_calls": [
            {"name": "ask_human", "arguments": {"question": "Which plan?", "options": ["basic", "pro"]}}
        ]
    },
    {"content": "ok"},
]


@pytest.fixture
def carol_token(personas) -> str:
    for user in (personas.alice, personas.admin):
        user.set_password(f"{user.username}-password")
        user.save()
    return token_create(user=personas.carol, scopes=["submit"])[1]


def audit(page, name: str, found: dict[str, list[dict]]) -> None:
    """Run axe on the page as it stands, at both widths; photograph it; keep its violations."""
    violations = []
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 900})
        for v in Axe().run(page).response["violations"]:
            violations.append(
                {
                    "width": width,
                    "id": v["id"],
                    "impact": v["impact"],
                    "help": v["help"],
                    "nodes": [n["target"] for n in v["nodes"]],
                }
            )
    page.set_viewport_size({"width": 1280, "height": 900})
    found[name] = violations
    SHOTS.mkdir(parents=True, exist_ok=True)
    (SHOTS / f"axe-{name}.json").write_text(json.dumps(violations, indent=2))
    shoot(page, f"a11y-{name}")


def test_no_page_of_the_desk_has_any_accessibility_violation_at_either_width(
    live_stack,
    carol_token,
    browser,  # noqa: F811
):
    decided_run = submit(live_stack, carol_token, SEND_EMAIL_SCRIPT)
    pending_run = submit(live_stack, carol_token, REFUND_SCRIPT)
    question_run = submit(live_stack, carol_token, QUESTION_SCRIPT)
    decided = wait_for_run(live_stack, carol_token, decided_run, "input_required")
    pending = wait_for_run(live_stack, carol_token, pending_run, "input_required")
    asked = wait_for_run(live_stack, carol_token, question_run, "input_required")
    found: dict[str, list[dict]] = {}

    page = log_in(browser, live_stack, "alice", f"/approvals/{decided['approvals'][0]['id']}/")
    natives: list[str] = []
    page.on("dialog", lambda dialog: (natives.append(dialog.message), dialog.dismiss()))
    page.keyboard.press("g")  # and always allow it, so that the grants page has a row
    page.click("button[name=verdict][value=approve]")  # an ordinary email: nothing asks
    page.wait_for_selector(".flash.success")
    assert natives == []
    assert wait_for_run(live_stack, carol_token, decided_run)["status"] == "succeeded"

    # The pending call carries where its arguments came from (a flag among them) and a high
    # second opinion: the desk's and its page's audits read those blocks too.
    pending_id = pending["approvals"][0]["id"]
    set_provenance(pending_id, [{**UNTRUSTED_TO, "pointer": "/order_id"}])
    announce_reading(
        pending_id, {**HIGH, "concerns": [*HIGH["concerns"], {"about": "step:2", "text": "a step"}]}
    )
    page.goto(live_stack.url + "/")
    card_for(page, pending_run)
    select(page, pending_run)
    page.wait_for_selector(f"li.card[data-run='{pending_run}'] section.reading")
    audit(page, "desk", found)
    page.goto(f"{live_stack.url}/approvals/{pending_id}/")
    page.wait_for_selector("#preview")
    page.wait_for_selector("#beside-call section.reading")
    audit(page, "approval", found)
    page.goto(f"{live_stack.url}/runs/{decided_run}/")
    audit(page, "run", found)
    page.goto(f"{live_stack.url}/runs/?status=input_required")
    page.wait_for_selector(f"a[href='/runs/{pending_run}/']")
    audit(page, "runs", found)
    page.goto(f"{live_stack.url}/grants/")
    page.wait_for_selector("#grants tbody tr[data-grant-id]")
    audit(page, "grants", found)
    page.goto(f"{live_stack.url}/?kind=question")
    card_for(page, question_run)
    audit(page, "questions", found)
    page.goto(f"{live_stack.url}/approvals/{asked['approvals'][0]['id']}/")
    page.wait_for_selector("#answer-form button.option:not(:disabled)")
    audit(page, "question", found)
    for name in ("settings", "tokens", "webhooks", "keys"):
        page.goto(f"{live_stack.url}/{name}/")
        audit(page, name, found)
    page.goto(f"{live_stack.url}/api/docs/")
    audit(page, "api-docs", found)

    admin = log_in(browser, live_stack, "admin", "/audit/")
    admin.wait_for_selector("#audit .badge.sig.ok")
    audit(admin, "audit", found)
    admin.goto(f"{live_stack.url}/mcp/")
    audit(admin, "mcp", found)
    login = browser.new_context().new_page()
    login.goto(f"{live_stack.url}/accounts/login/")
    audit(login, "login", found)

    impacts = {name: dict(Counter(v["impact"] for v in vs)) for name, vs in found.items()}
    print("axe violations by impact per page:", json.dumps(impacts))
    any_impact = {
        name: [f"{v['id']} ({v['impact']}, {v['width']} px): {v['nodes'][:3]}" for v in vs]
        for name, vs in found.items()
    }
    assert any_impact == {name: [] for name in found}, any_impact
