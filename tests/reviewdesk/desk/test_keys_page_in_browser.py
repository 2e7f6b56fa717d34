"""In headless Chromium: revoking a device key on the Keys page asks first in the page's own
dialog (#confirm, dialog.js), naming the key, never the browser's window.confirm.

The page comes from Django's test client; Chromium gets it, its scripts and its stylesheet
through a route, and every other request it makes is recorded and answered with a 404, so a
request to draft a revocation shows whether the page went on."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings
from django.templatetags.static import static
from django.test import Client
from playwright.sync_api import expect

from tests.reviewdesk.desk.chromium import desk_scripts, routed_page

pytestmark = pytest.mark.e2e

ORIGIN = "http://localhost:8932"
SCRIPTS = ("dialog.js", "devicekey.js", "keys.js")
RED = "rgb(180, 35, 24)"  # --color-red
WIDTHS = [
    pytest.param({"width": 1280, "height": 800}, id="1280x800"),
    pytest.param({"width": 390, "height": 844}, id="390x844"),
]


@pytest.mark.parametrize("viewport", WIDTHS)
def test_revoking_a_key_asks_in_the_page_dialog_and_cancel_keeps_it(personas, device_keys, viewport):
    """The admin clicks Revoke on alice's key: #confirm names the key (its user, label and
    fingerprint) with a red "Revoke key"; Cancel sends nothing. Confirmed, the page goes on to
    sign the revocation (this browser holds no key of the admin's, and says so)."""
    client = Client()
    client.force_login(personas.admin)
    response = client.get("/keys/")
    assert response.status_code == 200
    files = {f"{ORIGIN}/keys/": (response.content.decode(), "text/html")}
    files.update(desk_scripts(ORIGIN, SCRIPTS))
    files[f"{ORIGIN}{static('desk/desk.css')}"] = (
        (Path(settings.BASE_DIR) / "static/desk/desk.css").read_text(),
        "text/css",
    )
    other: list[str] = []

    def serve(route) -> None:
        body, content_type = files.get(route.request.url, ("", "text/plain"))
        if not body:
            other.append(f"{route.request.method} {route.request.url}")
        route.fulfill(body=body, content_type=content_type, status=200 if body else 404)

    key_id = device_keys.alice_key_id
    natives: list[str] = []
    with routed_page(ORIGIN, serve, path="/keys/", viewport=viewport) as page:
        page.on("dialog", lambda dialog: (natives.append(dialog.message), dialog.dismiss()))
        revoke = page.locator(f"button.revoke[data-key-id='{key_id}']")
        expect(revoke).to_be_enabled()
        revoke.click()
        dialog = page.locator("#confirm")
        expect(dialog).to_be_visible()
        expect(page.locator("#confirm-title")).to_have_text(f"Revoke {key_id}?")
        expect(page.locator("#confirm-lead")).to_contain_text("Decisions it signed stop running")
        facts = dialog.locator("dl.facts")
        expect(facts).to_contain_text("alice")
        fingerprint = page.locator(f"#key-list tr[data-key-id='{key_id}'] .fingerprint").text_content()
        expect(facts).to_contain_text(fingerprint)
        ok = page.locator("#confirm-ok")
        expect(ok).to_have_text("Revoke key")
        expect(ok).to_have_class("approve danger")
        assert ok.evaluate("(el) => getComputedStyle(el).backgroundColor") == RED
        assert page.evaluate(
            "document.getElementById('confirm').getBoundingClientRect().right <= window.innerWidth"
        )
        page.locator("#confirm-cancel").click()
        expect(dialog).to_be_hidden()
        expect(page.locator("#keys-status")).to_be_hidden()
        assert not any("/revoke" in request for request in other), other  # nothing drafted

        revoke.click()
        expect(dialog).to_be_visible()
        ok.click()
        expect(page.locator("#keys-status")).to_have_text(
            "Could not revoke: this browser holds no device key of yours to sign with"
        )
    assert natives == []


def test_a_confirmation_asked_again_right_after_one_was_cancelled_answers_its_own_button(personas):
    """dialog.js: the close event is queued, so one cancelled confirmation's event can arrive
    after the next was opened (Esc, then `a` at once). It must not answer the new one: the
    second dialog's confirming button still says yes."""
    client = Client()
    client.force_login(personas.admin)
    files = {f"{ORIGIN}/keys/": (client.get("/keys/").content.decode(), "text/html")}
    files.update(desk_scripts(ORIGIN, SCRIPTS))

    def serve(route) -> None:
        body, content_type = files.get(route.request.url, ("", "text/plain"))
        route.fulfill(body=body, content_type=content_type, status=200 if body else 404)

    with routed_page(ORIGIN, serve, path="/keys/") as page:
        answers = page.evaluate(
            """async () => {
              const first = window.DeskDialog.confirm({ title: "first" });
              document.getElementById("confirm-cancel").click(); // closed: its event is queued
              const second = window.DeskDialog.confirm({ title: "second" });
              await new Promise((resolve) => setTimeout(resolve, 50)); // the stale event arrives
              const stillOpen = document.getElementById("confirm").open;
              document.getElementById("confirm-ok").click();
              return [await first, stillOpen, await second];
            }"""
        )
    assert answers == [False, True, True]
