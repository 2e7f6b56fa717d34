"""In headless Chromium, with the desk's stylesheet: the approval page's first screen at
1280x800 and on a phone (390x844), and a question's page.

The page reads what will happen, why the agent asks, the decision, then the details; "What
will happen" is whole on the first screen, not under the decision bar, and the bar is one row.
On a phone the decision is on the first screen, its targets at least 44 px. A question reads as
a question: "The agent asks", the question once, focus on its first option (or its answer
field), options answered with 1-9. axe-core finds nothing on either page at either width.
Screenshots: var/screenshots/approval-*.png, question-*.png.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.reviewdesk.desk.styled_pages import (
    DESKTOP,
    PHONE,
    axe_violations,
    shoot,
    styled_page,
    visible_height,
)
from tests.reviewdesk.desk.test_approval_page_in_browser import COLOUR_QUESTION

pytestmark = pytest.mark.e2e

ORIGIN = "http://localhost:8941"
BAR_CONTROLS = "#decide-form .bar-row input, #decide-form .bar-row > button, #decide-form .bar-row > a"
FREE_TEXT_QUESTION = [
    {"tool_calls": [{"name": "ask_human", "arguments": {"question": "What should the subject line say?"}}]},
    {"content": "Thanks."},
]


def boxes(page, selector: str) -> list[dict]:
    return [page.locator(selector).nth(i).bounding_box() for i in range(page.locator(selector).count())]


def in_reading_order(page, *selectors: str) -> bool:
    """Whether the elements come in this order in the document (what a screen reader reads)."""
    return page.evaluate(
        """(selectors) => selectors.map((s) => document.querySelector(s)).every((el, i, all) =>
             i === 0 || Boolean(all[i - 1].compareDocumentPosition(el) & Node.DOCUMENT_POSITION_FOLLOWING))""",
        list(selectors),
    )


def test_at_1280x800_what_will_happen_is_whole_above_a_one_row_decision_bar(interrupted_run, personas):
    _, approval = interrupted_run()  # send_email: a preview with headers and a body
    with styled_page(personas.bob, f"/approvals/{approval.id}/", origin=ORIGIN, viewport=DESKTOP) as page:
        expect(page.locator("#decide-form button.approve")).to_be_enabled()
        preview = page.locator("#preview").bounding_box()
        bar = page.locator("#decide-form").bounding_box()
        shoot(page, "approval-1280")

        assert preview["height"] > 150  # the whole email: its headers and its body
        # Every pixel of the preview is on the first screen and none under the bar (sampled
        # every 2 px down its middle, so the count is the height rounded to 2 px).
        assert visible_height(page, "#preview") >= preview["height"] - 2, (preview, bar)
        assert preview["y"] + preview["height"] <= bar["y"]
        assert bar["height"] <= 64, bar
        assert bar["y"] + bar["height"] == DESKTOP["height"]  # at the bottom of the window
        controls = boxes(page, BAR_CONTROLS)
        assert len(controls) >= 4  # reason, approve, reject, edit, more
        middles = {round(b["y"] + b["height"] / 2) for b in controls}
        assert max(middles) - min(middles) <= 2, controls  # one row
        assert in_reading_order(page, "#what-will-happen", "#why-asks", "#decide-form", "#details-title")
        assert axe_violations(page) == []

        page.mouse.wheel(0, 3000)  # at the page's end the bar is still there, over nothing
        page.wait_for_function("() => scrollY > 0")
        expect(page.locator("#decide-form button.approve")).to_be_in_viewport()
        last = page.locator("#approval > section").last.bounding_box()
        assert last["y"] + last["height"] <= page.locator("#decide-form").bounding_box()["y"]


def test_g_opens_the_grant_fields_above_the_bar_and_more_opens_the_note(interrupted_run, personas):
    _, approval = interrupted_run()
    with styled_page(personas.bob, f"/approvals/{approval.id}/", origin=ORIGIN, viewport=DESKTOP) as page:
        expect(page.locator("#decide-form button.approve")).to_be_enabled()
        expect(page.locator("#bar-extras")).to_be_hidden()
        page.keyboard.press("g")
        expect(page.locator("#grant-on")).to_be_focused()
        expect(page.locator("#grant-on")).to_be_checked()
        expect(page.locator("#bar-more")).to_have_attribute("aria-expanded", "true")
        approve = page.locator("#decide-form button.approve").bounding_box()
        assert approve["y"] + approve["height"] <= DESKTOP["height"]  # the row stays in the window
        page.keyboard.press("Escape")
        page.locator("#bar-more").click()
        expect(page.locator("#bar-extras")).to_be_hidden()
        page.locator("#bar-more").click()
        expect(page.locator("#decide-form input[name=note]")).to_be_focused()


def test_on_a_phone_the_decision_is_on_the_first_screen_with_44px_targets(interrupted_run, personas):
    _, approval = interrupted_run()
    with styled_page(personas.bob, f"/approvals/{approval.id}/", origin=ORIGIN, viewport=PHONE) as page:
        expect(page.locator("#decide-form button.approve")).to_be_enabled()
        shoot(page, "approval-phone")
        bar = page.locator("#decide-form").bounding_box()
        assert bar["y"] + bar["height"] == PHONE["height"]  # at the bottom of the first screen
        assert bar["height"] <= 120, bar  # the reason, then the buttons: two rows at most
        for box in boxes(page, BAR_CONTROLS):
            assert box["height"] >= 44 and box["width"] >= 44, box
            assert box["y"] >= 0 and box["y"] + box["height"] <= PHONE["height"], box
        assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]  # no sideways scroll
        expect(page.locator("#decide-form kbd").first).to_be_hidden()  # no key hints on a touch screen
        assert visible_height(page, "#what-will-happen") > 0  # and the preview starts on it
        assert axe_violations(page) == []


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["1280", "phone"])
def test_a_question_reads_as_one_with_focus_on_its_first_option_and_answers_to_its_number(
    interrupted_run, personas, viewport
):
    _, question = interrupted_run(COLOUR_QUESTION)
    posted: list = []
    with styled_page(
        personas.bob, f"/approvals/{question.id}/", origin=ORIGIN, viewport=viewport, posted=posted
    ) as page:
        expect(page.locator("#answer-form button.option").first).to_be_focused()
        expect(page.locator("h1")).to_contain_text("The agent asks")
        assert page.evaluate("document.body.innerText.split('Which colour?').length - 1") == 1
        assert visible_height(page, "#answer-form button.option[value=blue]") > 0  # first screen
        for box in boxes(page, "#answer-form button.option"):
            assert box["height"] >= (44 if viewport is PHONE else 36), box
        shoot(page, f"question-{'phone' if viewport is PHONE else '1280'}")
        assert axe_violations(page) == []
        page.keyboard.press("2")
        expect(page.locator("body")).to_contain_text("posted natively")
    assert len(posted) == 1 and "answer=blue" in posted[0], posted


def test_a_free_text_question_puts_the_caret_in_its_answer(interrupted_run, personas):
    _, question = interrupted_run(FREE_TEXT_QUESTION)
    with styled_page(personas.bob, f"/approvals/{question.id}/", origin=ORIGIN, viewport=DESKTOP) as page:
        expect(page.locator("#answer-form textarea[name=answer]")).to_be_focused()
        page.keyboard.type("Refund: 2")  # digits and letters go into the answer, not to keys
        expect(page.locator("#answer-form textarea[name=answer]")).to_have_value("Refund: 2")
        expect(page.locator("#decide-form")).to_have_count(0)  # a question has its own form


def test_a_colleagues_decision_is_said_in_the_bar_where_the_reviewer_looks(interrupted_run, personas):
    """The socket's snapshot no longer holds the call (someone decided it): the notice at the
    top says so for a screen reader, and the bar says it in place of the reason, buttons off,
    still one row."""
    _, approval = interrupted_run()
    gone = {"type": "snapshot", "seq": 1, "data": {"approvals": [], "more": False}}
    with styled_page(
        personas.bob, f"/approvals/{approval.id}/", origin=ORIGIN, viewport=DESKTOP, snapshot=gone
    ) as page:
        expect(page.locator("#bar-gone")).to_contain_text("No longer pending")
        expect(page.locator("#decided-notice")).to_contain_text("No longer pending")
        expect(page.locator("#decide-form button.approve")).to_be_disabled()
        expect(page.locator("#decide-form input[name=reason]")).to_be_hidden()
        assert page.locator("#decide-form").bounding_box()["height"] <= 64
        assert axe_violations(page) == []
