"""In headless Chromium, with the desk's stylesheet, at 1280x800 and 390x844: the runs list, the
run page and its timeline, the audit page on a phone, the page's notices, and the copy button
beside a shortened id.

Runs are named by their task; a failed call reads "failed" though the run succeeded; the
timeline shows what a person cares about and folds the worker's steps until asked; nothing
scrolls sideways on a phone; notices float over the page instead of pushing it down; axe-core
finds nothing. Screenshots: var/screenshots/runs-*.png, run-*.png, audit-*.png, notices-*.png.
"""

from __future__ import annotations

import pytest
from django.urls import reverse
from playwright.sync_api import expect

from reviewdesk.approvals.deciding.record import approval_decide
from tests.reviewdesk.desk.styled_pages import DESKTOP, PHONE, axe_violations, shoot, styled_page
from tests.reviewdesk.desk.test_pages_name_runs_and_failed_calls import logged_in, refund_failed  # noqa: F401

pytestmark = pytest.mark.e2e

ORIGIN = "http://localhost:8942"
WIDTHS = pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["1280", "phone"])


def label(viewport: dict) -> str:
    return "phone" if viewport is PHONE else "1280"


def no_sideways_scroll(page) -> None:
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"], f"the page is {width} px wide"


@WIDTHS
def test_the_runs_list_names_runs_by_task_and_says_a_failed_call_failed(
    refund_failed,  # noqa: F811
    interrupted_run,
    personas,
    viewport,
):
    failed_run, _ = refund_failed
    waiting_run, _ = interrupted_run()
    with styled_page(personas.carol, "/runs/", origin=ORIGIN, viewport=viewport) as page:
        failed_row = page.locator(f"#runs tr[data-run-id='{failed_run.id}']")
        expect(failed_row.locator(".run-task a")).to_have_text("Tell Ada her refund is on its way.")
        expect(failed_row.locator(".status")).to_have_text("succeeded")
        expect(failed_row.locator(".outcome.failed").first).to_be_visible()
        expect(failed_row).to_contain_text("1 call failed")
        expect(failed_row.locator(".tool-chip.failed")).to_contain_text("refund_payment")
        waiting_row = page.locator(f"#runs tr[data-run-id='{waiting_run.id}']")
        expect(waiting_row.locator(".short-id code")).to_have_text(str(waiting_run.id)[:8])
        assert str(waiting_run.id) not in page.inner_text("body")
        no_sideways_scroll(page)
        shoot(page, f"runs-{label(viewport)}")
        assert axe_violations(page) == []


def test_the_copy_button_copies_the_whole_id_by_keyboard(interrupted_run, personas):
    run, _ = interrupted_run()
    with styled_page(
        personas.carol,
        "/runs/",
        origin=ORIGIN,
        viewport=DESKTOP,
        permissions=["clipboard-read", "clipboard-write"],
    ) as page:
        button = page.locator(f"#runs tr[data-run-id='{run.id}'] button.copy-id")
        button.focus()
        page.keyboard.press("Enter")
        expect(button).to_have_attribute("data-copied", "yes")
        assert page.evaluate("navigator.clipboard.readText()") == str(run.id)


@WIDTHS
def test_the_run_page_leads_with_what_happened_and_folds_the_workers_steps(
    refund_failed,  # noqa: F811
    personas,
    viewport,
):
    run, _ = refund_failed
    with styled_page(personas.carol, f"/runs/{run.id}/", origin=ORIGIN, viewport=viewport) as page:
        expect(page.locator("#run-title .run-name")).to_have_text("Tell Ada her refund is on its way.")
        expect(page.locator("#run-status")).to_have_text("succeeded")
        expect(page.locator("#run-failed-calls")).to_have_text("1 tool call failed")
        entries = page.locator("#timeline-list > li")
        shown = [t.strip() for t in page.locator("#timeline-list > li:visible .tl-text").all_text_contents()]
        assert shown == [
            "Run submitted",
            "Approval requested: refund_payment",
            "Approved refund_payment",
            "Effect refund_payment confirmed (failed)",
            "Run succeeded",
        ], shown
        failed = page.locator("#timeline-list > li.failed")
        expect(failed.locator(".tl-text")).to_contain_text("(failed)")
        colour = failed.locator(".tl-text").evaluate("el => getComputedStyle(el).color")
        assert colour == "rgb(180, 35, 24)", colour  # the desk's red
        shoot(page, f"run-{label(viewport)}")
        assert axe_violations(page) == []

        page.locator("label[for=show-worker-steps]").click()
        expect(page.locator("#timeline-list > li.worker").first).to_be_visible()
        assert page.locator("#timeline-list > li:visible").count() == entries.count()
        no_sideways_scroll(page)


@WIDTHS
def test_the_audit_page_fits_the_window(interrupted_run, personas, viewport):
    _, approval = interrupted_run()
    approval_decide(
        approval_id=approval.id,
        reviewer=personas.alice,
        verdict="approve",
        checkpoint_id=str(approval.checkpoint_id),
    )
    with styled_page(personas.admin, "/audit/", origin=ORIGIN, viewport=viewport) as page:
        expect(page.locator("#audit tbody tr").first).to_be_visible()
        no_sideways_scroll(page)
        # Every cell within the window (on a phone, a card per row): nothing cut off at the right.
        right = page.evaluate(
            "Math.max(...Array.from(document.querySelectorAll('#audit td'), (td) => td.getBoundingClientRect().right))"
        )
        assert right <= viewport["width"], right
        expect(page.locator("#audit td[data-label=Subject] .short-id code").first).to_be_visible()
        shoot(page, f"audit-{label(viewport)}")
        assert axe_violations(page) == []


@WIDTHS
def test_notices_float_over_the_page_in_one_box_and_are_dismissed(interrupted_run, personas, viewport):
    """Two notices (a hand-over's quoting a run's whole id, and the list's own): the list's
    table starts where it starts without them, the box names the run by eight characters, and
    its button dismisses it."""
    run, approval = interrupted_run()
    with styled_page(personas.bob, "/runs/", origin=ORIGIN, viewport=viewport) as page:
        table_top = page.locator("#runs").bounding_box()["y"]
    client = logged_in(personas.bob)
    client.post(reverse("approval-handover", args=[approval.id]), {"to": "alice", "note": ""})
    html = client.get("/runs/?offset=5000").content.decode()
    with styled_page(None, "/runs/?offset=5000", origin=ORIGIN, viewport=viewport, html=html) as page:
        box = page.locator("#page-notices")
        expect(box.locator(".flash")).to_have_count(2)
        expect(box).to_contain_text(f"for run {str(run.id)[:8]}…")
        assert page.locator("#runs").bounding_box()["y"] == table_top  # not pushed down
        bounds = box.bounding_box()
        assert bounds["x"] >= 0 and bounds["x"] + bounds["width"] <= viewport["width"]
        shoot(page, f"notices-{label(viewport)}")
        assert axe_violations(page) == []
        page.locator("#notices-close").click()
        expect(box).to_have_count(0)
