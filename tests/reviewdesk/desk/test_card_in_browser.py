"""In headless Chromium: the card desk.js builds from the template is the card the server renders.

The desk page comes from Django's test client; Chromium gets it, desk.js and a
stand-in socket that answers with a snapshot of the same approvals. desk.js then
replaces every server card with one cloned from #card-template, so the two can be
compared element by element. No server process runs here; tests/e2e covers the
live socket.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.conf import settings
from django.templatetags.static import static
from django.test import Client
from playwright.sync_api import expect

from reviewdesk.events.builders import approval_data

pytestmark = pytest.mark.e2e

CHROMIUM = "/usr/bin/chromium"
ORIGIN = "http://desk.test"

# Replaces WebSocket before desk.js runs: records where it connects, marks the server's
# cards (a mark that survives only if desk.js fails to replace them), sends the snapshot and
# then the pushes, if any.
FAKE_SOCKET = """
window.__socketUrls = [];
window.WebSocket = class {
  constructor(url) {
    window.__socketUrls.push(url);
    document.querySelectorAll("li.card").forEach((card) => { card.dataset.fromServer = "yes"; });
    this.readyState = 1;
    setTimeout(() => {
      this.onopen();
      this.onmessage({ data: JSON.stringify(window.__snapshot) });
      (window.__pushes || []).forEach((push) => this.onmessage({ data: JSON.stringify(push) }));
      window.__snapshotApplied = true;
    }, 0);
  }
  send() {}
};
window.WebSocket.OPEN = 1;
"""

# An element as data: tag, attributes (form fields by their current value; the CSRF token,
# masked afresh at every render, left out), its own text, then its children. What desk.js
# keeps moving on every card alike (the countdown, the selection mark) is left out.
SHAPE = """
(root) => {
  const shape = (el) => {
    const attrs = {};
    for (const a of el.attributes) if (a.name !== "aria-current") attrs[a.name] = a.value;
    if (el.classList.contains("countdown")) return [el.tagName.toLowerCase(), {}, "", []];
    if (el.tagName === "INPUT") {
      if (el.name === "csrfmiddlewaretoken") delete attrs.value;
      else attrs.value = el.value;
    }
    const text = [...el.childNodes].filter((n) => n.nodeType === 3)
      .map((n) => n.textContent.replace(/\\s+/g, " ").trim()).filter(Boolean).join(" ");
    return [el.tagName.toLowerCase(), attrs, text, [...el.children].map(shape)];
  };
  return [...root.querySelectorAll("li.card")].map(shape);
}
"""


@contextmanager
def desk_in_chromium(html: str, snapshot: dict, pushes: list[dict] | None = None) -> Iterator:
    """The desk page `html` with desk.js, its socket a stand-in that sends `snapshot` then
    `pushes`: the page once all of them are applied."""
    files = {f"{ORIGIN}/": (html, "text/html")}
    for script in ("shown.js", "time.js", "desk.js"):
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
            page.add_init_script(
                f"window.__snapshot = {json.dumps(snapshot)}; window.__pushes = {json.dumps(pushes or [])};"
                + FAKE_SOCKET
            )
            page.goto(f"{ORIGIN}/")
            page.wait_for_function("window.__snapshotApplied === true")
            yield page
        finally:
            browser.close()


def test_desk_js_builds_the_card_the_server_renders_for_each_kind(pending, personas):
    approvals = [pending("tool_call"), pending("reconcile")]
    client = Client()
    client.force_login(personas.bob)
    html = client.get("/").content.decode()
    snapshot = {"seq": 0, "type": "snapshot", "data": {"approvals": [approval_data(a) for a in approvals]}}
    # What the server rendered, before desk.js touches it.
    with desk_in_chromium(html, snapshot) as page:
        served = page.evaluate(
            f"(html) => ({SHAPE})(new DOMParser().parseFromString(html, 'text/html'))", html
        )
        built = page.evaluate(SHAPE, page.query_selector("#approvals"))
        socket_urls = page.evaluate("window.__socketUrls")

    assert [card[1]["data-kind"] for card in served] == ["tool_call", "reconcile"]
    assert built == served
    assert socket_urls == ["ws://desk.test/ws/desk/?events=approvals"]  # approval events only


def test_an_approval_pushed_onto_an_empty_desk_is_the_selected_card(pending, personas):
    """The keys act on the selected card: one that arrives while the queue is empty must be it,
    as the first card is when the page or its snapshot draws the queue. (A test that pressed `o`
    just after its run's card arrived waited forever when the card came by push.)"""
    client = Client()
    client.force_login(personas.bob)
    html = client.get("/").content.decode()  # nothing pending yet
    approval = approval_data(pending("tool_call"))
    snapshot = {"seq": 0, "type": "snapshot", "data": {"approvals": []}}
    pushed = {"seq": 1, "type": "approval.created", "data": approval}
    with desk_in_chromium(html, snapshot, [pushed]) as page:
        card = page.locator(f"li.card[data-approval-id='{approval['id']}']")
        expect(card).to_have_attribute("aria-current", "true")
