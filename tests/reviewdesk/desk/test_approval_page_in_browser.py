"""In headless Chromium: the approval page's decision buttons wait for the scripts that handle them.

The page comes from Django's test client; Chromium gets it and its scripts through a route,
with one script held back (404) to stand for a script not run yet, or, for approval_sign.js,
a device-key lookup not answered yet. Clicked before, a button would post its form natively:
no confirmation, no diff before an edit, and for a reviewer with an endorsed device key, a
decision signed by the server while this browser holds the reviewer's own key.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.test import Client
from playwright.sync_api import expect

from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.approvals.models import ApprovalKind, ApprovalRequest
from reviewdesk.approvals.reads.representation import approval_data
from reviewdesk.events.services import latest_seq
from tests.reviewdesk.desk.chromium import desk_scripts, routed_page

pytestmark = pytest.mark.e2e

# localhost is a secure context: WebCrypto and IndexedDB work as on the real desk (https).
ORIGIN = "http://localhost:8931"
SCRIPTS = ("shown.js", "time.js", "schema.js", "approval.js", "devicekey.js", "approval_sign.js")
# approval.js opens the desk socket: here one that sends window.__snapshot, if any, and no more
# (or, with window.__noSocket, one the browser refuses).
FAKE_SOCKET = """
window.WebSocket = class {
  constructor() {
    if (window.__noSocket) throw new DOMException("refused", "SecurityError");
    if (window.__snapshot) setTimeout(() => this.onmessage({ data: JSON.stringify(window.__snapshot) }), 0);
  }
  send() {}
  close() {}
};
"""
# Every form submission starts with a submit event, fired within the click or key press that
# caused it (before Playwright's click or press returns): counted here, in the capture phase, so
# even one a page script then cancels. A count of 0 after the press proves no post was sent,
# without waiting a while to see whether one arrives.
SUBMIT_COUNTER = """
window.__submits = 0;
document.addEventListener("submit", () => { window.__submits += 1; }, true);
"""
DECISION_BUTTONS = ("#decide-form button.approve", "#decide-form button.reject", "#edit-submit")


@contextmanager
def approval_page(
    user, approval, *, held_back: str | None, snapshot=None, init: str = "", posted: list | None = None
) -> Iterator:
    """Load the approval page as `user` in a fresh browser (no device key held), `held_back`
    never served, its socket sending `snapshot()`, read after the page: the page once loaded
    (every script served has run). `init` runs before the page's scripts; a POST to the page
    (a form sent natively) is answered with a stub and its body added to `posted`."""
    client = Client()
    client.force_login(user)
    path = f"/approvals/{approval.id}/"
    response = client.get(path)
    assert response.status_code == 200
    socket_sends = f"window.__snapshot = {json.dumps(snapshot())};" if snapshot else ""
    files = {f"{ORIGIN}{path}": (response.content.decode(), "text/html")}
    files.update(desk_scripts(ORIGIN, SCRIPTS, held_back=held_back))

    def serve(route) -> None:
        if route.request.method == "POST" and route.request.url == f"{ORIGIN}{path}":
            if posted is not None:
                posted.append(route.request.post_data or "")
            route.fulfill(status=200, body="<p>posted natively</p>", content_type="text/html")
            return
        body, content_type = files.get(route.request.url, ("", "text/plain"))
        route.fulfill(body=body, content_type=content_type, status=200 if body else 404)

    with routed_page(
        ORIGIN, serve, path=path, init=socket_sends + init + FAKE_SOCKET + SUBMIT_COUNTER
    ) as page:
        yield page


def test_with_a_device_key_the_buttons_wait_for_the_signer_then_work(pending, personas, device_keys):
    """alice has an endorsed device key: until approval_sign.js has looked for it in this
    browser, a click would be signed by the server. Once it knows (here: no key held), they work."""
    approval = pending("tool_call")
    with approval_page(personas.alice, approval, held_back="approval_sign.js") as page:
        for button in DECISION_BUTTONS:
            expect(page.locator(button)).to_be_disabled()
        assert page.evaluate("typeof window.DeskApproval") == "object"  # though approval.js has run
    with approval_page(personas.alice, approval, held_back=None) as page:
        for button in DECISION_BUTTONS:  # on the lookup's answer, not the fallback's timer (3 s)
            expect(page.locator(button)).to_be_enabled(timeout=2_000)
        expect(page.locator("#device-signing")).to_be_hidden()  # no key here: the server signs


def test_without_a_device_key_the_buttons_wait_for_approval_js(pending, personas):
    """bob holds no device key: the buttons wait for approval.js alone (the confirmation of an
    irreversible call, the diff before an edit, Enter in a field not approving)."""
    approval = pending("tool_call")
    with approval_page(personas.bob, approval, held_back="approval.js") as page:
        for button in DECISION_BUTTONS:
            expect(page.locator(button)).to_be_disabled()
    with approval_page(personas.bob, approval, held_back="approval_sign.js") as page:
        for button in DECISION_BUTTONS:
            expect(page.locator(button)).to_be_enabled()


EXECUTE_SCRIPT = [
    {"tool_calls": [{"name": "execute", "arguments": {"command": "echo hi"}}]},
    {"content": "Ran it."},
]


def test_a_vote_between_the_page_and_its_socket_shows_in_the_count(interrupted_run, personas):
    """bob opens a call that needs two approvals; alice votes before his page's socket has
    joined, so no event reaches it: the socket's snapshot must, or bob reads "0 of 2" until he
    reloads. (tests/e2e/test_quorum_and_handover_browser.py let alice vote before bob's socket
    was live.)"""
    _, approval = interrupted_run(script=EXECUTE_SCRIPT)

    def alice_votes_then_the_snapshot():
        approval_decide(
            approval_id=approval.id,
            reviewer=personas.alice,
            verdict="approve",
            checkpoint_id=str(approval.checkpoint_id),
        )
        queued = approval_data(ApprovalRequest.objects.get(pk=approval.pk))
        return {"type": "snapshot", "seq": latest_seq(), "data": {"approvals": [queued], "more": False}}

    with approval_page(
        personas.bob, approval, held_back=None, snapshot=alice_votes_then_the_snapshot
    ) as page:
        expect(page.locator("#quorum-count")).to_have_text("1 of 2")
        expect(page.locator("#quorum-by")).to_have_text("approved by alice")
        expect(page.locator("#decide-form button.approve")).to_be_enabled()  # still bob's to decide


# IndexedDB's open() answering neither success nor error, as a wedged key store does.
HUNG_KEY_STORE = "IDBFactory.prototype.open = function () { return {}; };"


def test_before_the_signer_is_known_an_edit_cannot_be_sent(pending, personas, device_keys):
    """alice has an endorsed device key and the lookup has not answered (approval_sign.js held
    back): typing a valid edit must not enable 'Review the changes' (the schema check did), or
    its second click posts the form natively, and the server signs the edit."""
    approval = pending("tool_call")
    posted: list = []
    with approval_page(personas.alice, approval, held_back="approval_sign.js", posted=posted) as page:
        page.on("dialog", lambda dialog: dialog.accept())
        page.evaluate("document.getElementById('edit').open = true")
        box = page.locator("#edit-arguments")
        box.fill(box.input_value().replace("ada@", "bob@", 1))  # valid: the schema passes it
        # The schema check has run on what was typed (it marks the field), and left it off.
        expect(box).to_have_attribute("aria-invalid", "false")
        expect(page.locator("#schema-errors")).to_have_text("")
        expect(page.locator("#edit-submit")).to_be_disabled()
        page.locator("#edit-submit").click(force=True)  # review: nothing, disabled
        page.locator("#edit-submit").click(force=True)  # sign: nothing
        assert page.evaluate("window.__submits") == 0  # neither click submitted the form
    assert posted == []


def test_without_devicekey_js_the_server_signs_rather_than_nobody(pending, personas, device_keys):
    """devicekey.js did not load: approval_sign.js cannot look for a key; the buttons are armed
    (the server signs, as in a browser without WebCrypto) instead of staying off for good."""
    approval = pending("tool_call")
    with approval_page(personas.alice, approval, held_back="devicekey.js") as page:
        for button in DECISION_BUTTONS:
            expect(page.locator(button)).to_be_enabled()


def test_a_key_store_that_never_answers_arms_the_buttons_and_says_who_signs(pending, personas, device_keys):
    """IndexedDB's open hangs: the buttons wait for the lookup a while, then the page says the
    server signs here and arms them, rather than leave alice with no way to decide."""
    approval = pending("tool_call")
    with approval_page(personas.alice, approval, held_back=None, init=HUNG_KEY_STORE) as page:
        expect(page.locator("#decide-form button.approve")).to_be_disabled()
        for button in DECISION_BUTTONS:
            expect(page.locator(button)).to_be_enabled(timeout=10_000)
        expect(page.locator("#device-signing")).to_contain_text("signed by the server")


def type_then_enter(page, field: str, text: str) -> None:
    """Type `text` in the one-line `field` and press Enter, then check that the Enter submitted
    nothing: an implicit submission fires its submit event within the key press."""
    page.locator(field).fill(text)
    page.locator(field).press("Enter")
    assert page.evaluate("window.__submits") == 0, f"Enter in {field} submitted its form"


COLOUR_QUESTION = [
    {
        "tool_calls": [
            {"name": "ask_human", "arguments": {"question": "Which colour?", "options": ["red", "blue"]}}
        ]
    },
    {"content": "Thanks."},
]


def test_enter_in_a_questions_note_answers_nothing_and_its_options_wait_for_approval_js(
    interrupted_run, personas
):
    """A question with options: Enter in "Note to the agent" would submit with the form's first
    button, answering "red" for a reviewer who only typed a note. With approval.js it does
    nothing, and a click on an option answers; before approval.js the options are off."""
    _, question = interrupted_run(COLOUR_QUESTION)
    with approval_page(personas.bob, question, held_back="approval.js") as page:
        for option in ("red", "blue"):
            expect(page.locator(f"#answer-form button.option[value={option}]")).to_be_disabled()
    posted: list = []
    with approval_page(personas.bob, question, held_back=None, posted=posted) as page:
        type_then_enter(page, "#answer-form input[name=note]", "the brand's blue, please")
        assert posted == []  # the note answered nothing
        page.locator("#answer-form button.option[value=blue]").click()
        expect(page.locator("body")).to_contain_text("posted natively")
    assert len(posted) == 1 and "answer=blue" in posted[0], posted


def test_enter_in_a_reconciliations_field_does_not_mark_it_done(pending, personas):
    """A reconciliation: Enter in its Reason would submit with the form's first button, "It
    happened: mark done". With approval.js it does nothing."""
    reconcile = pending(ApprovalKind.RECONCILE)
    posted: list = []
    with approval_page(personas.bob, reconcile, held_back=None, posted=posted) as page:
        type_then_enter(page, "#reconcile-form input[name=reason]", "not sure it went out")
    assert posted == []


def test_without_time_js_or_a_socket_the_buttons_still_arm(pending, personas):
    """time.js did not load, and the browser refuses the socket: approval.js must still arm the
    decision buttons (they are served off), or bob could not decide at all."""
    approval = pending("tool_call")
    no_socket = "window.__noSocket = true;"
    with approval_page(personas.bob, approval, held_back="time.js", init=no_socket) as page:
        for button in DECISION_BUTTONS:
            expect(page.locator(button)).to_be_enabled()


def test_enter_in_an_edits_field_never_signs_the_edit(pending, personas):
    """Enter in the edit's Reason or Note submitted with the form's first button: once to show
    the diff, and once more to sign the edited arguments, unasked (an edit approves them).
    With approval.js it does nothing; the button still shows the diff, then signs."""
    approval = pending("tool_call")
    posted: list = []
    with approval_page(personas.bob, approval, held_back=None, posted=posted) as page:
        page.on("dialog", lambda dialog: dialog.accept())
        page.locator("#edit summary").click()
        edited = {**approval.arguments, "subject": "Your refund is on its way"}
        page.locator("#edit-arguments").fill(json.dumps(edited))
        for field in ("#edit-form input[name=reason]", "#edit-form input[name=note]"):
            type_then_enter(page, field, "shorter subject")
            type_then_enter(page, field, "shorter subject")
        assert posted == []
        expect(page.locator("#diff")).to_be_hidden()
        page.locator("#edit-submit").click()
        expect(page.locator("#diff")).to_be_visible()
        page.locator("#edit-submit").click()
        expect(page.locator("body")).to_contain_text("posted natively")
    assert len(posted) == 1 and "verdict=edit" in posted[0], posted
