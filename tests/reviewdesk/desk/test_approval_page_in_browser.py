"""In headless Chromium: the approval page's decision buttons wait for the scripts that handle them.

The page comes from Django's test client; Chromium gets it and its scripts through a route,
with one script held back (404) to stand for a script not run yet, or, for approval_sign.js,
a device-key lookup not answered yet. Clicked before, a button would post its form natively:
no confirmation, no diff before an edit, and for a reviewer with an endorsed device key, a
decision signed by the server while this browser holds the reviewer's own key.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.conf import settings
from django.templatetags.static import static
from django.test import Client
from playwright.sync_api import expect

pytestmark = pytest.mark.e2e

CHROMIUM = "/usr/bin/chromium"
# localhost is a secure context: WebCrypto and IndexedDB work as on the real desk (https).
ORIGIN = "http://localhost:8931"
SCRIPTS = ("shown.js", "time.js", "schema.js", "approval.js", "devicekey.js", "approval_sign.js")
# approval.js opens the desk socket: here one that never answers.
QUIET_SOCKET = "window.WebSocket = class { send() {} close() {} };"
DECISION_BUTTONS = ("#decide-form button.approve", "#decide-form button.reject", "#edit-submit")


@contextmanager
def approval_page(user, approval, *, held_back: str | None) -> Iterator:
    """Load the approval page as `user` in a fresh browser (no device key held), `held_back`
    never served: the page once loaded (every script served has run)."""
    client = Client()
    client.force_login(user)
    path = f"/approvals/{approval.id}/"
    response = client.get(path)
    assert response.status_code == 200
    files = {f"{ORIGIN}{path}": (response.content.decode(), "text/html")}
    for script in SCRIPTS:
        if script != held_back:
            files[f"{ORIGIN}{static('desk/' + script)}"] = (
                (Path(settings.BASE_DIR) / "static/desk" / script).read_text(),
                "application/javascript",
            )

    def serve(route) -> None:
        body, content_type = files.get(route.request.url, ("", "text/plain"))
        route.fulfill(body=body, content_type=content_type, status=200 if body else 404)

    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "install Debian's chromium (.ci/run does it with apt-get)"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"], headless=True)
        try:
            page = browser.new_page()
            page.route(f"{ORIGIN}/**", serve)
            page.add_init_script(QUIET_SOCKET)
            page.goto(f"{ORIGIN}{path}")
            yield page
        finally:
            browser.close()


def test_with_a_device_key_the_buttons_wait_for_the_signer_then_work(pending, personas, device_keys):
    """alice has an endorsed device key: until approval_sign.js has looked for it in this
    browser, a click would be signed by the server. Once it knows (here: no key held), they work."""
    approval = pending("tool_call")
    with approval_page(personas.alice, approval, held_back="approval_sign.js") as page:
        for button in DECISION_BUTTONS:
            expect(page.locator(button)).to_be_disabled()
        assert page.evaluate("typeof window.DeskApproval") == "object"  # though approval.js has run
    with approval_page(personas.alice, approval, held_back=None) as page:
        for button in DECISION_BUTTONS:
            expect(page.locator(button)).to_be_enabled()
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
