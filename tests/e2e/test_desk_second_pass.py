"""The desk, second pass (issue 35), as a reviewer meets it in headless Chromium against daphne
and a Celery worker, at 1280x800 and at 390x844: "select all similar" leaves the unusual out and
its confirmation lists each call's facts; the editor takes the caret and refuses an edit that
changes nothing; the keys never die after the reviewer's own decision; only the unusual asks
first, in a page dialog; a queue entry is the preview's gist with one risk line; a question is
answered with a number or a typed answer; on a phone the first decision is on the first screen.

Each test prints, with `pytest -s`, the keystrokes and the time from a new item on the screen to
its signed decision, and saves screenshots under var/screenshots/ (desk-*, item-*, question-*,
batch-confirm-*, phone-desk)."""

from __future__ import annotations

import time

import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import expect

from reviewdesk.accounts.services import token_create
from tests.e2e.conftest import http, wait_for_run
from tests.e2e.test_desk_review import SHOTS, browser, submit  # noqa: F401

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
WIDTHS = [pytest.param(DESKTOP, id="1280x800"), pytest.param(PHONE, id="390x844")]
RED = "rgb(180, 35, 24)"  # --color-red


@pytest.fixture
def carol_token(personas) -> str:
    for user in (personas.alice, personas.bob):
        user.set_password(f"{user.username}-password")
        user.save()
    return token_create(user=personas.carol, scopes=["submit"])[1]


def email(
    to: str, subject: str = "Your refund", body: str = "It is on its way.\nThanks for your patience."
) -> list:
    arguments = {"to": to, "subject": subject, "body": body}
    return [{"tool_calls": [{"name": "send_email", "arguments": arguments}]}, {"content": "Sent."}]


def refund(order: str, amount: float) -> list:
    arguments = {"order_id": order, "amount": amount}
    return [{"tool_calls": [{"name": "refund_payment", "arguments": arguments}]}, {"content": "Done."}]


def question(text: str, **more) -> list:
    return [
        {"tool_calls": [{"name": "ask_human", "arguments": {"question": text, **more}}]},
        {"content": "Thanks."},
    ]


LOOKALIKE = email("ada@examp1e.com", body="Your refund\u202e is on its way.")


def desk(browser, stack, username: str, viewport: dict, path: str = "/", **context):  # noqa: F811
    page = browser.new_context(viewport=viewport, **context).new_page()
    page.goto(stack.url + "/accounts/login/?next=" + path)
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", f"{username}-password")
    page.click("button[type=submit]")
    page.wait_for_selector("#approvals[data-synced='1']", timeout=20_000)
    return page


def card(page, run_id: str):
    return page.locator(f"li.card[data-run='{run_id}']")


def wait_cards(page, run_ids: list[str]) -> None:
    for run_id in run_ids:
        expect(card(page, run_id)).to_have_count(1, timeout=30_000)
        expect(card(page, run_id)).to_have_attribute("data-summary", "ready", timeout=10_000)


def choose(page, run_id: str) -> None:
    """Select a card as a reviewer with a mouse does: a click on its row."""
    card(page, run_id).locator(".row").click()
    expect(card(page, run_id)).to_have_attribute("aria-current", "true")


def width_name(viewport: dict) -> str:
    return "1280" if viewport is DESKTOP else "phone"


def shoot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"))


def axe_violations(page) -> list:
    return [
        {"id": v["id"], "impact": v["impact"], "nodes": [n["target"] for n in v["nodes"]]}
        for v in Axe().run(page).response["violations"]
    ]


def say(what: str, keys: int, seconds: float) -> None:
    print(
        f"\n[timing] {what}: {keys} keystrokes, {seconds:.2f} s from the item on screen to its signed decision"
    )


@pytest.mark.parametrize("viewport", WIDTHS)
def test_select_all_similar_leaves_the_unusual_out_and_the_confirmation_lists_the_facts(
    live_stack,
    carol_token,
    browser,  # noqa: F811
    viewport,
):
    similar = [submit(live_stack, carol_token, email("ada@example.com")) for _ in range(11)]
    other = submit(live_stack, carol_token, email("grace@example.com"))
    outlier = submit(live_stack, carol_token, LOOKALIKE)
    page = desk(browser, live_stack, "alice", viewport)
    wait_cards(page, [*similar, other, outlier])
    shoot(page, f"desk-{width_name(viewport)}")
    assert axe_violations(page) == []

    started = time.monotonic()
    choose(page, similar[0])
    page.keyboard.press("A")  # 1: select all similar
    expect(page.locator("#batch-count")).to_have_text("12 selected")
    expect(card(page, outlier)).not_to_have_attribute("data-picked", "yes")
    expect(page.locator("#notices")).to_contain_text("1 similar send_email call was left out")
    # The difference names the value, not just the field.
    expect(card(page, other).locator(".differs")).to_contain_text('to: "grace@example.com"')
    page.keyboard.press("a")  # 2: approve the selection: a page dialog, never window.confirm
    dialog = page.locator("dialog#confirm")
    expect(dialog).to_be_visible()
    expect(dialog.locator("#confirm-title")).to_have_text("Approve 12 calls?")
    items = dialog.locator("#confirm-items > li")
    expect(items).to_have_count(12)
    expect(items.first.locator("dl.facts")).to_contain_text("ada@example.com")
    expect(items.first.locator("dl.facts")).to_contain_text("Your refund")
    expect(dialog).not_to_contain_text("examp1e")
    shoot(page, f"batch-confirm-{width_name(viewport)}")
    page.keyboard.press("Enter")  # 3: the dialog's Approve (no warning listed: it has the focus)
    expect(page.locator("#notices .flash.success")).to_contain_text("12 approved", timeout=30_000)
    seconds = time.monotonic() - started
    expect(page.locator("li.card")).to_have_count(1)
    say(f"approve a batch of 12 similar, one outlier left out ({width_name(viewport)})", 3, seconds)

    # Only an explicit x picks the outlier, and its confirmation shows its warnings in red.
    choose(page, outlier)
    page.keyboard.press("x")
    expect(page.locator("#batch-count")).to_have_text("1 selected")
    page.keyboard.press("a")
    expect(dialog).to_be_visible()
    warning = dialog.locator(".warning").first
    expect(warning).to_contain_text("ada@examp1e.com is not a known customer's address")
    assert warning.evaluate("(el) => getComputedStyle(el).color") == RED
    expect(page.locator("#confirm-cancel")).to_be_focused()  # Enter alone does not sign the unusual
    page.keyboard.press("Escape")
    expect(dialog).not_to_be_visible()
    expect(card(page, outlier)).to_have_count(1)
    for run_id in [*similar, other]:
        assert wait_for_run(live_stack, carol_token, run_id)["status"] == "succeeded"


@pytest.mark.parametrize("viewport", WIDTHS)
def test_only_the_unusual_asks_first_and_the_dialog_states_its_facts(
    live_stack,
    carol_token,
    browser,  # noqa: F811
    viewport,
):
    ordinary = submit(live_stack, carol_token, email("ada@example.com"))
    outlier = submit(live_stack, carol_token, LOOKALIKE)
    page = desk(browser, live_stack, "alice", viewport)
    asked: list[str] = []
    page.on("dialog", lambda d: (asked.append(d.message), d.dismiss()))
    wait_cards(page, [ordinary, outlier])
    choose(page, outlier)
    shoot(page, f"item-{width_name(viewport)}")
    page.keyboard.press("a")
    dialog = page.locator("dialog#confirm")
    expect(dialog).to_be_visible()
    expect(dialog.locator("dl.facts")).to_contain_text("ada@examp1e.com")
    expect(dialog).to_contain_text("the arguments contain invisible characters")
    page.keyboard.press("Enter")  # the focus is on Cancel: nothing is signed
    expect(dialog).not_to_be_visible()
    expect(card(page, outlier)).to_have_count(1)

    choose(page, ordinary)
    started = time.monotonic()
    page.keyboard.press("a")  # an ordinary email: `a` decides, nothing asks
    expect(card(page, ordinary)).to_have_count(0, timeout=10_000)
    seconds = time.monotonic() - started
    expect(dialog).not_to_be_visible()
    assert asked == []  # never the browser's window.confirm
    say(f"approve ({width_name(viewport)})", 1, seconds)
    decision = wait_for_run(live_stack, carol_token, ordinary)["approvals"][0]["decision"]
    assert (decision["verdict"], decision["reviewer"]) == ("approve", "alice")


@pytest.mark.parametrize("viewport", WIDTHS)
def test_a_queue_entry_is_the_previews_gist_with_a_risk_line_and_nothing_breaks_a_word(
    live_stack,
    carol_token,
    browser,  # noqa: F811
    viewport,
):
    too_much = submit(live_stack, carol_token, refund("A-1001", 300))  # more than is left: will fail
    reasoned = email("ada@example.com", body="Line one\nLine two\nLine three\nLine four")
    reasoned[0]["content"] = "Ada asked for the status in <b>ticket 7</b>."
    mail = submit(live_stack, carol_token, reasoned)
    page = desk(browser, live_stack, "alice", viewport)
    wait_cards(page, [too_much, mail])
    row = card(page, too_much).locator(".row")
    expect(row.locator(".risk-line")).to_contain_text("exceeds what is left to refund")
    expect(row.locator(".gist")).to_contain_text("This refund: 300.00")
    mail_card = card(page, mail)
    expect(mail_card.locator(".gist")).to_contain_text("To: ada@example.com · Subject: Your refund")
    approval_id = mail_card.get_attribute("data-approval-id")
    row_text = mail_card.locator(".row").text_content()
    assert (
        approval_id not in row_text
        and "SHA" not in row_text
        and "T0" not in row_text
        and "T1" not in row_text
    )
    choose(page, mail)
    detail = mail_card.locator(".detail")
    expect(detail.locator(".body-lines")).to_have_text("Line one\nLine two\nLine three\n…")
    # The model's reason, read when the card is selected, marked untrusted and kept as text.
    asks = detail.locator("section.asks")
    expect(asks.locator(".asking-text")).to_have_text("Ada asked for the status in <b>ticket 7</b>.")
    expect(asks.locator(".untrusted-tag")).to_have_text("model text, untrusted")
    assert asks.locator(".asking-text b").count() == 0
    choose(page, too_much)  # said nothing: the pane says so, not "reading…"
    expect(card(page, too_much).locator(".asking-text")).to_have_text(
        "The model made the call without a message."
    )
    choose(page, mail)
    expect(detail.locator("details.signed .sha")).to_be_hidden()  # one click away
    detail.locator("details.signed > summary").click()
    expect(detail.locator("details.signed .sha")).to_be_visible()
    # No word broken inside, nothing scrolls sideways.
    broken = page.evaluate(
        """() => [...document.querySelectorAll('body *')].filter((el) =>
             getComputedStyle(el).wordBreak === 'break-all').map((el) => el.className)"""
    )
    assert broken == []
    assert page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth")
    sideways = page.evaluate(
        """() => [...document.querySelectorAll('li.card pre, li.card dd')].filter((el) =>
             el.offsetParent && el.scrollWidth > el.clientWidth + 1).map((el) => el.className)"""
    )
    assert sideways == []


@pytest.mark.parametrize("viewport", WIDTHS)
def test_a_question_reads_as_one_and_is_answered_with_a_number_or_a_typed_answer(
    live_stack,
    carol_token,
    browser,  # noqa: F811
    viewport,
):
    calls = [submit(live_stack, carol_token, email("ada@example.com")) for _ in range(3)]
    options = submit(
        live_stack, carol_token, question("Which order should I refund?", options=["A-1001", "A-1002"])
    )
    free = submit(live_stack, carol_token, question("What should I tell Ada?"))
    page = desk(browser, live_stack, "alice", viewport)
    for run_id in [*calls, options, free]:
        expect(card(page, run_id)).to_have_count(1, timeout=30_000)
    page.locator("#questions-tab").click()
    page.wait_for_selector("#approvals[data-synced='1']")
    expect(page.locator("li.card")).to_have_count(2)
    expect(page.locator("li.card[data-kind=tool_call]")).to_have_count(0)
    choose(page, options)
    detail = card(page, options).locator(".detail")
    expect(detail.locator("p.question")).to_have_text("The agent asks: Which order should I refund?")
    # Headed as a question, not by its tool's name (ask_human), and its text shown once.
    expect(card(page, options).locator(".row .kind-tag")).to_have_text("Question")
    shown = page.evaluate(
        """() => [...document.querySelectorAll('li.card *')].filter((el) => el.checkVisibility()
             && [...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.includes('ask_human'))).length"""
    )
    assert shown == 0
    texts = page.evaluate(
        """() => [...document.querySelectorAll('li.card[aria-current=true] *')].filter((el) => el.checkVisibility()
             && [...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.includes('Which order'))).map((el) => el.className)"""
    )
    assert texts == ["question-text model-text"], texts
    shoot(page, f"question-{width_name(viewport)}")
    assert axe_violations(page) == []
    started = time.monotonic()
    page.keyboard.press("2")
    expect(card(page, options)).to_have_count(0, timeout=10_000)
    seconds = time.monotonic() - started
    say(f"answer a question with an option ({width_name(viewport)})", 1, seconds)

    choose(page, free)
    started = time.monotonic()
    page.keyboard.press("a")  # the caret goes to the answer field
    field = card(page, free).locator("input.free-answer")
    expect(field).to_be_focused()
    page.keyboard.type("Tell her it is on its way")  # an `a`, an `r`, an `o`: typing, not keys
    page.keyboard.press("Enter")
    expect(card(page, free)).to_have_count(0, timeout=10_000)
    seconds = time.monotonic() - started
    say(
        f"answer a question with typed text ({width_name(viewport)})",
        2 + len("Tell her it is on its way"),
        seconds,
    )
    answered = wait_for_run(live_stack, carol_token, options)["approvals"][0]["decision"]
    assert answered["answer"] == "A-1002"
    typed = wait_for_run(live_stack, carol_token, free)["approvals"][0]["decision"]
    assert typed["answer"] == "Tell her it is on its way"


@pytest.mark.parametrize("viewport", WIDTHS)
def test_e_puts_the_caret_in_the_first_field_and_an_edit_that_changes_nothing_is_refused(
    live_stack,
    carol_token,
    browser,  # noqa: F811
    viewport,
):
    run_id = submit(live_stack, carol_token, refund("A-1001", 150))
    page = desk(browser, live_stack, "alice", viewport)
    wait_cards(page, [run_id])
    choose(page, run_id)
    started = time.monotonic()
    page.keyboard.press("e")
    form = card(page, run_id).locator("form.edit-form")
    first = form.locator("[data-name=order_id]")
    expect(first).to_be_focused()
    assert form.locator("[data-name=amount]").get_attribute("type") == "number"  # from the schema
    page.keyboard.press("Enter")  # nothing changed
    expect(form.locator(".edit-problems")).to_have_text("No changes: use Approve")
    expect(card(page, run_id)).to_have_count(1)
    page.keyboard.press("Tab")
    page.keyboard.press("Control+a")
    page.keyboard.type("120")
    page.keyboard.press("Enter")
    expect(card(page, run_id)).to_have_count(0, timeout=10_000)
    seconds = time.monotonic() - started
    say(
        f"edit one field, with a refused no-change try first ({width_name(viewport)})",
        1 + 1 + 1 + 1 + 3 + 1,
        seconds,
    )
    decision = wait_for_run(live_stack, carol_token, run_id)["approvals"][0]["decision"]
    assert (decision["verdict"], decision["arguments"]) == ("edit", {"order_id": "A-1001", "amount": 120})


@pytest.mark.parametrize("viewport", WIDTHS)
def test_g_grants_by_keyboard_alone(
    live_stack,
    carol_token,
    browser,  # noqa: F811
    viewport,
):
    """`g` opens the item's grant fields with the caret on them (not in a field the next keys
    would type into), Escape leaves the field, and `a` approves with the grant: three keys."""
    run_id = submit(live_stack, carol_token, email("ada@example.com"))
    page = desk(browser, live_stack, "alice", viewport)
    native = []
    page.on("dialog", lambda d: (native.append(d.message), d.dismiss()))
    wait_cards(page, [run_id])
    choose(page, run_id)
    started = time.monotonic()
    page.keyboard.press("g")
    page.wait_for_url("**#grant")
    page.wait_for_load_state("load")
    expect(page.locator("#grant-on")).to_be_focused()
    expect(page.locator("#grant-on")).to_be_checked()
    page.keyboard.press("Escape")
    page.keyboard.press("a")
    page.wait_for_selector(".flash.success")
    say(f"approve and always allow ({width_name(viewport)})", 3, time.monotonic() - started)
    assert native == []  # an ordinary email asks nothing, in no browser dialog
    assert wait_for_run(live_stack, carol_token, run_id)["approvals"][0]["decision"]["verdict"] == "approve"
    page.goto(live_stack.url + "/grants/")
    expect(page.locator("#grants tbody tr[data-grant-id]")).to_have_count(1)
    expect(page.locator("#grants tbody tr[data-grant-id]")).to_contain_text("send_email")


@pytest.mark.parametrize("viewport", WIDTHS)
def test_the_reviewers_own_reject_never_holds_the_keys_and_a_colleagues_decision_says_so_once(
    live_stack,
    carol_token,
    browser,  # noqa: F811
    viewport,
):
    runs = [submit(live_stack, carol_token, email("ada@example.com")) for _ in range(4)]
    page = desk(browser, live_stack, "alice", viewport)
    wait_cards(page, runs)
    first = page.get_attribute("li.card[aria-current=true]", "data-run")
    started = time.monotonic()
    page.keyboard.press("r")
    reason = "wrong recipient"
    page.keyboard.type(reason)
    page.keyboard.press("Enter")
    expect(card(page, first)).to_have_count(0, timeout=10_000)
    seconds = time.monotonic() - started
    say(f"reject with a reason ({width_name(viewport)})", 2 + len(reason), seconds)
    # 36 presses of j over about 1.5 s, straight after: the selection moves to the last card.
    selected = page.get_attribute("li.card[aria-current=true]", "data-run")
    for _ in range(36):
        page.keyboard.press("j", delay=40)
    last = page.locator("li.card").last.get_attribute("data-run")
    assert last != selected
    expect(page.locator("li.card[aria-current=true]")).to_have_attribute("data-run", last)
    rejected = wait_for_run(live_stack, carol_token, first)["approvals"][0]["decision"]
    assert (rejected["verdict"], rejected["reason"]) == ("reject", reason)

    # bob rejects the card alice is typing a reason in: said once; keys pause without extending.
    page.keyboard.press("k")
    target = page.get_attribute("li.card[aria-current=true]", "data-run")
    page.keyboard.press("r")
    page.keyboard.type("not yet")
    bob = desk(browser, live_stack, "bob", DESKTOP)
    choose(bob, target)
    bob.keyboard.press("r")
    bob.keyboard.type("bob says no")
    bob.keyboard.press("Enter")
    expect(card(page, target)).to_have_count(0, timeout=10_000)
    said = page.locator("#notices .flash", has_text="You were typing in it")
    expect(said).to_have_count(1)
    expect(said).to_contain_text("reject by bob")
    held_until = page.evaluate("window.DeskQueue.heldUntil()")  # the page's clock, ms
    for _ in range(3):  # typed on during the pause ...
        page.keyboard.press("x", delay=30)
    pressed_by = page.evaluate("Date.now()")
    assert page.evaluate("window.DeskQueue.heldUntil()") == held_until  # ... they do not lengthen it
    if pressed_by < held_until:
        expect(page.locator("#batch")).to_be_hidden()  # and were no commands (no pick)
    page.wait_for_timeout(max(0, held_until - pressed_by) + 50)
    before = page.get_attribute("li.card[aria-current=true]", "data-run")
    assert page.locator("li.card").last.get_attribute("data-run") == before  # the last: k moves
    page.keyboard.press("k")
    expect(page.locator("li.card[aria-current=true]")).not_to_have_attribute("data-run", before)
    expect(said).to_have_count(1)  # said once


def test_on_a_phone_the_first_decision_is_on_the_first_screen_and_targets_fit_a_finger(
    live_stack,
    carol_token,
    browser,  # noqa: F811
):
    runs = [submit(live_stack, carol_token, email("ada@example.com")) for _ in range(3)]
    page = desk(browser, live_stack, "alice", PHONE, is_mobile=True, has_touch=True)
    wait_cards(page, runs)
    shoot(page, "phone-desk")
    first = page.locator("li.card").first
    approve = first.locator("button.approve")
    box = approve.bounding_box()
    assert box and box["y"] + box["height"] <= PHONE["height"], box
    # Navigation and filters fold away; hints for keys are hidden on a touch screen.
    expect(page.locator("#site-nav")).to_be_hidden()
    expect(page.locator("#filters")).to_be_hidden()
    expect(page.locator("#nav-toggle")).to_be_visible()
    expect(first.locator("kbd").first).to_be_hidden()
    small = page.evaluate(
        """() => [...document.querySelectorAll(
               'button, select, input:not([type=hidden]):not([type=checkbox]), summary, .tabs a, .site-nav a')]
             .filter((el) => el.offsetParent && el.closest('li.card[aria-current=true], header, .desk-head'))
             .map((el) => { const r = el.getBoundingClientRect(); return [el.className || el.tagName, r.width, r.height]; })
             .filter(([, w, h]) => h < 44 || w < 24)"""
    )
    assert small == [], small
    boxes = page.evaluate(
        """() => [...document.querySelectorAll('li.card[aria-current=true] input[type=checkbox]')]
             .map((el) => el.closest('label').getBoundingClientRect().height)"""
    )
    assert boxes and min(boxes) >= 44, boxes
    assert axe_violations(page) == []
    page.locator("#nav-toggle").click()
    expect(page.locator("#site-nav")).to_be_visible()
    expect(page.locator("#site-nav a[aria-current=page]")).to_have_text("Desk")
    page.locator("#nav-toggle").click()
    decided = first.get_attribute("data-run")
    approve.tap()
    expect(card(page, decided)).to_have_count(0, timeout=10_000)


def approval_page(browser, stack, username: str, viewport: dict, approval_id: str):  # noqa: F811
    page = browser.new_context(viewport=viewport).new_page()
    page.goto(f"{stack.url}/accounts/login/?next=/approvals/{approval_id}/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", f"{username}-password")
    page.click("button[type=submit]")
    expect(page.locator("#decide-form button.approve")).to_be_enabled(timeout=10_000)
    return page


@pytest.mark.parametrize("viewport", WIDTHS)
def test_on_the_approval_page_only_the_unusual_asks_first_in_the_page_dialog(
    live_stack,
    carol_token,
    browser,  # noqa: F811
    viewport,
):
    """As on the desk: an ordinary email is approved at once with `a`; the lookalike address
    with an invisible character asks in #confirm (its facts, its warnings in red, the focus on
    Cancel): Enter cancels and the call stays pending; "Approve anyway" decides it. The
    browser's own dialog never opens."""
    ordinary = submit(live_stack, carol_token, email("ada@example.com"))
    outlier = submit(live_stack, carol_token, LOOKALIKE)
    natives: list[str] = []

    def pending_approval(run_id: str) -> str:
        return wait_for_run(live_stack, carol_token, run_id, "input_required")["approvals"][0]["id"]

    page = approval_page(browser, live_stack, "alice", viewport, pending_approval(ordinary))
    page.on("dialog", lambda d: (natives.append(d.message), d.dismiss()))
    page.keyboard.press("a")  # an ordinary email: decided, nothing asks
    expect(page.locator(".flash.success")).to_contain_text("Approved send_email", timeout=10_000)
    decision = wait_for_run(live_stack, carol_token, ordinary)["approvals"][0]["decision"]
    assert (decision["verdict"], decision["reviewer"]) == ("approve", "alice")

    page.goto(f"{live_stack.url}/approvals/{pending_approval(outlier)}/")
    expect(page.locator("#decide-form button.approve")).to_be_enabled(timeout=10_000)
    page.keyboard.press("a")
    dialog = page.locator("dialog#confirm")
    expect(dialog).to_be_visible()
    expect(dialog.locator("dl.facts")).to_contain_text("ada@examp1e.com")
    expect(dialog).to_contain_text("the arguments contain invisible characters")
    warning = dialog.locator(".warning").first
    expect(warning).to_contain_text("ada@examp1e.com is not a known customer's address")
    assert warning.evaluate("(el) => getComputedStyle(el).color") == RED
    expect(page.locator("#confirm-cancel")).to_be_focused()
    assert axe_violations(page) == []
    page.keyboard.press("Enter")  # on Cancel: nothing is signed
    expect(dialog).not_to_be_visible()
    _, run = http("GET", f"{live_stack.url}/api/v1/runs/{outlier}", token=carol_token)
    assert run["approvals"][0]["status"] == "pending" and run["approvals"][0]["decision"] is None

    page.keyboard.press("a")
    expect(dialog).to_be_visible()
    page.locator("#confirm-ok").click()
    expect(page.locator(".flash.success")).to_contain_text("Approved send_email", timeout=10_000)
    decision = wait_for_run(live_stack, carol_token, outlier)["approvals"][0]["decision"]
    assert (decision["verdict"], decision["reviewer"]) == ("approve", "alice")
    assert natives == []
