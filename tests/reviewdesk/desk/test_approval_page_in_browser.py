"""In headless Chromium: the approval page's decision buttons wait for the scripts that handle them.

The page comes from Django's test client; Chromium gets it and its scripts through a route,
with one script held back (404) to stand for a script not run yet, or, for approval_sign.js,
a device-key lookup not answered yet. Clicked before, a button would post its form natively:
no confirmation, no diff before an edit, and for a reviewer with an endorsed device key, a
decision signed by the server while this browser holds the reviewer's own key.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.templatetags.static import static
from django.test import Client
from playwright.sync_api import expect

from agents.decisions import is_device_signed
from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.approvals.models import ApprovalKind, ApprovalRequest, Decision
from reviewdesk.approvals.reads.representation import approval_data
from reviewdesk.demo.models import DemoRefund
from reviewdesk.events.services import latest_seq
from tests.reviewdesk.desk.chromium import desk_scripts, routed_page

pytestmark = pytest.mark.e2e

# localhost is a secure context: WebCrypto and IndexedDB work as on the real desk (https).
ORIGIN = "http://localhost:8931"
SCRIPTS = ("shown.js", "time.js", "schema.js", "dialog.js", "approval.js", "devicekey.js", "approval_sign.js")
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
def orm_in_the_loop(connection) -> Iterator:
    """While Playwright's sync API runs, its event loop counts as running in the test's thread
    (a route handler, the test itself), where Django refuses the ORM (SynchronousOnlyOperation)
    and a route handler would get a connection of its own, outside the test's transaction. The
    code is synchronous and runs alone, in the test's thread: for its duration it may use the
    ORM, on `connection`, the test's own."""
    before = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    connections[DEFAULT_DB_ALIAS] = connection
    try:
        yield
    finally:
        if before is None:
            del os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"]
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = before


@contextmanager
def approval_page(
    user,
    approval,
    *,
    held_back: str | None,
    snapshot=None,
    init: str = "",
    posted: list | None = None,
    decide: bool = False,
    api: list | None = None,
    **options,
) -> Iterator:
    """Load the approval page as `user` in a fresh browser (no device key held), `held_back`
    never served, its socket sending `snapshot()`, read after the page: the page once loaded
    (every script served has run). `init` runs before the page's scripts; a POST to the page
    (a form sent natively) is answered with a stub and its body added to `posted`, and with
    `decide` also posted to the page in Django (a decision stored as the page would store it),
    as are the page's requests to /api/ (a device-signed decision), each added to `api`.
    The preview endpoint is Django's. `options` go to Playwright's new_page (viewport)."""
    client = Client()
    client.force_login(user)
    path = f"/approvals/{approval.id}/"
    preview_path = f"/approvals/{approval.id}/preview"
    connection = connections[DEFAULT_DB_ALIAS]
    response = client.get(path)
    assert response.status_code == 200
    socket_sends = f"window.__snapshot = {json.dumps(snapshot())};" if snapshot else ""
    files = {f"{ORIGIN}{path}": (response.content.decode(), "text/html")}
    files.update(desk_scripts(ORIGIN, SCRIPTS, held_back=held_back))
    # The stylesheet too: the dialog's look (its warnings in red, its width) is part of it.
    files[f"{ORIGIN}{static('desk/desk.css')}"] = (
        (Path(settings.BASE_DIR) / "static/desk/desk.css").read_text(),
        "text/css",
    )

    def serve(route) -> None:
        if route.request.method == "POST" and route.request.url == f"{ORIGIN}{preview_path}":
            with orm_in_the_loop(connection):
                answer = client.post(
                    preview_path, data=route.request.post_data, content_type="application/json"
                )
            route.fulfill(status=answer.status_code, body=answer.content, content_type="application/json")
            return
        if route.request.method == "POST" and route.request.url == f"{ORIGIN}{path}":
            if posted is not None:
                posted.append(route.request.post_data or "")
            if decide:
                form = route.request.post_data or ""
                with orm_in_the_loop(connection):
                    client.post(path, data=form, content_type="application/x-www-form-urlencoded")
            route.fulfill(status=200, body="<p>posted natively</p>", content_type="text/html")
            return
        if decide and route.request.url.startswith(f"{ORIGIN}/api/"):  # a device-signed decision
            if api is not None:
                api.append(f"{route.request.method} {route.request.url}")
            url = route.request.url.removeprefix(ORIGIN)
            with orm_in_the_loop(connection):
                if route.request.method == "POST":
                    answer = client.post(url, data=route.request.post_data, content_type="application/json")
                else:
                    answer = client.get(url)
            route.fulfill(status=answer.status_code, body=answer.content, content_type="application/json")
            return
        body, content_type = files.get(route.request.url, ("", "text/plain"))
        route.fulfill(body=body, content_type=content_type, status=200 if body else 404)

    with routed_page(
        ORIGIN, serve, path=path, init=socket_sends + init + FAKE_SOCKET + SUBMIT_COUNTER, **options
    ) as page:
        yield page


@contextmanager
def no_native_dialog(page) -> Iterator:
    """Fail if the browser's own dialog (window.confirm, alert, prompt) opens meanwhile: the
    page asks in its own dialog (#confirm), which names what is about to be signed."""
    natives: list[str] = []
    page.on("dialog", lambda dialog: (natives.append(dialog.message), dialog.dismiss()))
    yield
    assert natives == [], natives


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

    posted: list = []
    with (
        approval_page(
            personas.bob, approval, held_back=None, snapshot=alice_votes_then_the_snapshot, posted=posted
        ) as page,
        no_native_dialog(page),
    ):
        expect(page.locator("#quorum-count")).to_have_text("1 of 2")
        expect(page.locator("#quorum-by")).to_have_text("approved by alice")
        expect(page.locator("#decide-form button.approve")).to_be_enabled()  # still bob's to decide
        # Served as the first of two votes, bob's is now the last: approving asks first.
        page.locator("#decide-form button.approve").click()
        expect(page.locator("#confirm")).to_be_visible()
        expect(page.locator("#confirm .warning")).to_contain_text("yours is the last of 2 approvals")
        page.locator("#confirm-cancel").click()
        expect(page.locator("#confirm")).to_be_hidden()
    assert posted == []


# IndexedDB's open() answering neither success nor error, as a wedged key store does.
HUNG_KEY_STORE = "IDBFactory.prototype.open = function () { return {}; };"


def test_before_the_signer_is_known_an_edit_cannot_be_sent(pending, personas, device_keys):
    """alice has an endorsed device key and the lookup has not answered (approval_sign.js held
    back): typing a valid edit must not enable 'Review the changes' (the schema check did), or
    its second click posts the form natively, and the server signs the edit."""
    approval = pending("tool_call")
    posted: list = []
    with (
        approval_page(personas.alice, approval, held_back="approval_sign.js", posted=posted) as page,
        no_native_dialog(page),
    ):
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
    with approval_page(personas.bob, approval, held_back=None, posted=posted) as page, no_native_dialog(page):
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
        page.locator("#edit-submit").click()  # an ordinary edit (a known customer): signed, unasked
        expect(page.locator("body")).to_contain_text("posted natively")
    assert len(posted) == 1 and "verdict=edit" in posted[0], posted


# The repository's var/screenshots, as the e2e tests save theirs.
SHOTS = Path(settings.BASE_DIR) / "var" / "screenshots"
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
WIDTHS = [pytest.param(DESKTOP, id="1280x800"), pytest.param(PHONE, id="390x844")]
RED = "rgb(180, 35, 24)"  # --color-red
REFUND_SCRIPT = [
    {"tool_calls": [{"name": "refund_payment", "arguments": {"order_id": "A-1001", "amount": 250}}]},
    {"content": "Refunded."},
]


def refunded_already(amount: str) -> None:
    """A-1001 (250.00) has had `amount` refunded: a refund of more than the rest warns."""
    DemoRefund.objects.create(order_id="A-1001", amount=Decimal(amount), idempotency_key="earlier")


@pytest.fixture
def status_of(db):
    """status_of(approval) → its status in the database, read even while a page is open, on
    the test's connection (taken here, before any page: see orm_in_the_loop)."""
    connection = connections[DEFAULT_DB_ALIAS]

    def read(approval) -> str:
        with orm_in_the_loop(connection):
            return ApprovalRequest.objects.get(pk=approval.pk).status

    return read


def fits_the_width(page, selector: str) -> bool:
    """Nothing in `selector` reaches past the window's right edge, or scrolls sideways."""
    return page.evaluate(
        """(selector) => {
             const box = document.querySelector(selector);
             const inside = [box, ...box.querySelectorAll('*')].filter((el) => el.offsetParent || el === box);
             return inside.every((el) => el.getBoundingClientRect().right <= window.innerWidth + 0.5
                                       && el.scrollWidth <= el.clientWidth + 1 || getComputedStyle(el).overflowX === 'auto');
           }""",
        selector,
    )


def test_an_ordinary_irreversible_approve_decides_at_once(pending, personas, status_of):
    """send_email acts outside the desk, but to a known customer with nothing unusual: `a`
    decides, and neither the browser's confirm nor the page's dialog asks first."""
    approval = pending("tool_call")
    posted: list = []
    with (
        approval_page(personas.bob, approval, held_back=None, posted=posted, decide=True) as page,
        no_native_dialog(page),
    ):
        expect(page.locator("#decide-form button.approve")).to_be_enabled()
        page.keyboard.press("a")
        expect(page.locator("body")).to_contain_text("posted natively")
    assert len(posted) == 1 and "verdict=approve" in posted[0], posted
    assert status_of(approval) == "approved"


@pytest.mark.parametrize("viewport", WIDTHS)
def test_an_unusual_approve_asks_in_the_page_dialog_and_enter_does_not_sign(
    interrupted_run, personas, status_of, viewport
):
    """A refund of more than is left: `a` opens #confirm stating the call's facts and its
    warning in red, the focus on Cancel, so Enter cancels; nothing is posted and the call stays
    pending. `a` again, then "Approve anyway": decided."""
    _, approval = interrupted_run(REFUND_SCRIPT)
    refunded_already("100.00")
    posted: list = []
    with (
        approval_page(
            personas.bob, approval, held_back=None, posted=posted, decide=True, viewport=viewport
        ) as page,
        no_native_dialog(page),
    ):
        dialog = page.locator("#confirm")
        expect(page.locator("#decide-form button.approve")).to_be_enabled()
        page.keyboard.press("a")
        expect(dialog).to_be_visible()
        expect(page.locator("#confirm-title")).to_have_text("Approve this refund_payment?")
        expect(dialog.locator("#confirm-items > li > strong")).to_have_text("refund_payment · demo")
        expect(dialog.locator("dl.facts")).to_contain_text("This refund")
        expect(dialog.locator("dl.facts")).to_contain_text("250.00")
        warning = dialog.locator(".warning")
        expect(warning).to_have_text("⚠ this refund exceeds what is left to refund (150.00): it will fail")
        assert warning.evaluate("(el) => getComputedStyle(el).color") == RED
        expect(page.locator("#confirm-ok")).to_have_text("Approve anyway")
        expect(page.locator("#confirm-cancel")).to_be_focused()
        assert fits_the_width(page, "#confirm"), "the dialog overflows the window"
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"approval-confirm-{viewport['width']}.png"))
        submits = page.evaluate("window.__submits")
        page.keyboard.press("a")  # the page's keys sleep while the dialog is open
        assert page.evaluate("window.__submits") == submits
        page.keyboard.press("Enter")  # on Cancel: nothing is signed
        expect(dialog).to_be_hidden()
        assert posted == []
        assert status_of(approval) == "pending"

        page.keyboard.press("a")
        expect(dialog).to_be_visible()
        page.locator("#confirm-ok").click()
        expect(page.locator("body")).to_contain_text("posted natively")
    assert len(posted) == 1 and "verdict=approve" in posted[0], posted
    assert status_of(approval) == "approved"


@pytest.mark.parametrize("viewport", WIDTHS)
def test_an_edit_asks_only_when_its_edited_call_is_unusual(interrupted_run, personas, status_of, viewport):
    """The refund as asked (250.00 of 250.00) is ordinary; edited to 300.00 it exceeds what is
    left: signing the edit asks in #confirm, naming the edited amount and the warning. Cancel
    posts nothing; "Sign the edit anyway" signs the edited arguments."""
    _, approval = interrupted_run(REFUND_SCRIPT)
    posted: list = []
    with (
        approval_page(
            personas.bob, approval, held_back=None, posted=posted, decide=True, viewport=viewport
        ) as page,
        no_native_dialog(page),
    ):
        dialog = page.locator("#confirm")
        page.locator("#edit summary").click()
        page.locator("#edit-arguments").fill(json.dumps({"order_id": "A-1001", "amount": 300}))
        page.locator("#edit-submit").click()  # the diff
        expect(page.locator("#diff")).to_be_visible()
        page.locator("#edit-submit").click()  # sign: the edited call is unusual
        expect(dialog).to_be_visible()
        expect(page.locator("#confirm-title")).to_have_text("Sign the edited refund_payment?")
        expect(dialog.locator("dl.facts")).to_contain_text("300.00")
        expect(dialog.locator(".warning")).to_contain_text("exceeds what is left to refund (250.00)")
        expect(page.locator("#confirm-cancel")).to_be_focused()
        assert fits_the_width(page, "#confirm"), "the dialog overflows the window"
        page.locator("#confirm-cancel").click()
        expect(dialog).to_be_hidden()
        assert posted == []
        assert status_of(approval) == "pending"
        page.locator("#edit-submit").click()
        expect(dialog).to_be_visible()
        page.locator("#confirm-ok").click()
        expect(page.locator("body")).to_contain_text("posted natively")
    assert len(posted) == 1 and "verdict=edit" in posted[0], posted
    approval.refresh_from_db()
    assert approval.status == "approved"
    assert approval.decision.verdict == "edit" and approval.decision.arguments["amount"] == 300


def test_rejecting_an_unusual_call_never_asks(interrupted_run, personas):
    _, approval = interrupted_run(REFUND_SCRIPT)
    refunded_already("100.00")
    posted: list = []
    with approval_page(personas.bob, approval, held_back=None, posted=posted) as page, no_native_dialog(page):
        page.locator("#decide-form input[name=reason]").fill("too much")
        page.locator("#decide-form button.reject").click()
        expect(page.locator("body")).to_contain_text("posted natively")
    assert len(posted) == 1 and "verdict=reject" in posted[0], posted


def hold_key_in_browser(page, key, key_id: str, username: str) -> None:
    """Put `key` in this browser's key store as devicekey.js keeps a key it made (the private
    half a non-extractable CryptoKey), for `username`, then reload: approval_sign.js finds it."""
    pkcs8 = key.private_bytes(Encoding.DER, PrivateFormat.PKCS8, NoEncryption())
    raw = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    page.evaluate(
        """async ([pkcs8, raw, keyId, username]) => {
             const bytes = (b64) => Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
             const privateKey = await crypto.subtle.importKey("pkcs8", bytes(pkcs8), { name: "Ed25519" }, false, ["sign"]);
             const publicKey = await crypto.subtle.importKey("raw", bytes(raw), { name: "Ed25519" }, true, ["verify"]);
             const db = await new Promise((resolve, reject) => {
               const request = indexedDB.open("reviewdesk-device-keys", 1);
               request.onupgradeneeded = () => request.result.createObjectStore("keys", { keyPath: "key_id" });
               request.onsuccess = () => resolve(request.result);
               request.onerror = () => reject(request.error);
             });
             await new Promise((resolve, reject) => {
               const tx = db.transaction("keys", "readwrite");
               tx.objectStore("keys").put({ key_id: keyId, username, label: "test", fingerprint: "", privateKey, publicKey });
               tx.oncomplete = resolve;
               tx.onerror = () => reject(tx.error);
             });
             db.close();
           }""",
        [base64.b64encode(pkcs8).decode(), base64.b64encode(raw).decode(), key_id, username],
    )
    page.reload()


def test_a_confirmed_unusual_approve_is_signed_by_the_device_key_and_a_cancelled_one_is_not(
    interrupted_run, personas, device_keys, status_of
):
    """alice's browser holds her endorsed device key. An unusual approve is held for the
    dialog: cancelled, approval_sign.js never saw it (no payload fetched); confirmed, the
    re-sent submit reaches approval_sign.js, which signs it with her key."""
    _, approval = interrupted_run(REFUND_SCRIPT)
    refunded_already("100.00")
    api: list = []
    with (
        approval_page(personas.alice, approval, held_back=None, decide=True, api=api) as page,
        no_native_dialog(page),
    ):
        hold_key_in_browser(page, device_keys.alice, device_keys.alice_key_id, "alice")
        expect(page.locator("#device-signing")).to_contain_text(device_keys.alice_key_id)
        expect(page.locator("#decide-form button.approve")).to_be_enabled()
        page.keyboard.press("a")
        expect(page.locator("#confirm")).to_be_visible()
        page.locator("#confirm-cancel").click()
        expect(page.locator("#confirm")).to_be_hidden()
        assert api == []  # the held submit never reached approval_sign.js
        page.keyboard.press("a")
        page.locator("#confirm-ok").click()
        for _ in range(100):
            if status_of(approval) != "pending":
                break
            page.wait_for_timeout(100)
    assert [request.split(" ")[0] for request in api] == ["GET", "POST"], api
    assert status_of(approval) == "approved"
    decision = Decision.objects.get(request_id=approval.pk)
    assert decision.key_id == device_keys.alice_key_id and is_device_signed(decision.payload)
