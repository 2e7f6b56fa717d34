"""In headless Chromium: an external run's call on the desk (issue 37). desk.js builds the card
the server renders for it (where it comes from, the framework's preview marked untrusted, no
Edit where the framework cannot edit, the all-or-nothing line); and the card and the approval
page at 1280 and 390 px wide, screenshotted to var/screenshots/external-*.png for a person."""

from __future__ import annotations

import pytest
from django.test import Client
from playwright.sync_api import expect

from reviewdesk.approvals.models import ApprovalRequest
from reviewdesk.approvals.reads.representation import approval_data
from reviewdesk.runs.external.submit import ExternalSubmission, external_submit
from tests.reviewdesk.desk.styled_pages import DESKTOP, PHONE, shoot, styled_page
from tests.reviewdesk.desk.test_card_in_browser import SHAPE, armed, desk_in_chromium
from tests.reviewdesk.external.conftest import call

pytestmark = pytest.mark.e2e

ORIGIN = "http://desk.test"
PREVIEW = "Refund 250 EUR to the card ending 4242 for order 1234.\nThe customer is told by email."


def submit(personas, *calls, resume_policy="per_call", external_id="oa:thread-42"):
    return external_submit(
        submitter=personas.carol,
        submission=ExternalSubmission(
            external_id=external_id,
            framework="pydantic-ai" if resume_policy == "all_or_nothing" else "openai-agents",
            agent="support-bot",
            title="Refund order 1234",
            input="Please refund my order 1234: it arrived broken.",
            checkpoint="state-1",
            resume_policy=resume_policy,
            calls=list(calls),
            context={
                "messages": [{"role": "user", "content": "Please refund my order 1234."}],
                "truncated": False,
            },
        ),
    ).approvals


def test_desk_js_builds_the_external_card_the_server_renders(personas):
    no_edit = submit(personas, call("call_1", verdicts=["approve", "reject"], preview=PREVIEW))[0]
    batch = submit(personas, call("call_2"), resume_policy="all_or_nothing", external_id="pa:run-7")[0]
    client = Client()
    client.force_login(personas.bob)
    html = client.get("/").content.decode()
    snapshot = {
        "seq": 0,
        "type": "snapshot",
        # As stored: PostgreSQL's jsonb orders an object's keys its own way, as the page shows them.
        "data": {
            "approvals": [approval_data(ApprovalRequest.objects.get(pk=a.pk)) for a in (no_edit, batch)]
        },
    }
    with desk_in_chromium(html, snapshot) as page:
        served = page.evaluate(
            f"(html) => ({SHAPE})(new DOMParser().parseFromString(html, 'text/html'))", html
        )
        built = page.evaluate(SHAPE, page.query_selector("#approvals"))
        first = page.locator(f"li.card[data-approval-id='{no_edit.id}']")
        expect(first.locator(".no-edit")).to_contain_text("openai-agents cannot edit this call")
        expect(first.locator("button.edit-open")).to_have_count(0)
        second = page.locator(f"li.card[data-approval-id='{batch.id}']")
        expect(second.locator("button.edit-open")).to_have_count(1)
        expect(second.locator(".all-or-nothing")).to_contain_text(
            "None of these calls runs until all are decided"
        )
    armed(served)
    assert built == served


@pytest.mark.parametrize(("viewport", "width"), [(DESKTOP, 1280), (PHONE, 390)])
def test_the_external_card_and_its_page_at_desktop_and_phone_width(personas, viewport, width):
    approval = submit(personas, call("call_1", verdicts=["approve", "reject"], preview=PREVIEW))[0]
    with styled_page(personas.bob, "/", origin=ORIGIN, viewport=viewport) as page:
        card = page.locator(f"li.card[data-approval-id='{approval.id}']")
        card.click()
        expect(card.locator(".external-from")).to_be_visible()
        expect(card.locator(".preview-text")).to_contain_text("card ending 4242")
        expect(card.locator(".no-edit")).to_be_visible()
        expect(card.locator("button.edit-open")).to_have_count(0)
        card.locator(".no-edit").scroll_into_view_if_needed()
        shoot(page, f"external-card-{width}")
    with styled_page(personas.bob, f"/approvals/{approval.id}/", origin=ORIGIN, viewport=viewport) as page:
        expect(page.locator("#external-preview")).to_be_visible()
        expect(page.locator("#no-edit")).to_be_visible()
        expect(page.locator("#edit-link")).to_have_count(0)
        shoot(page, f"external-approval-{width}")
