"""In headless Chromium: the live run page's controls, swapped as the run changes.

The page comes from Django's test client, rendered before Chromium starts: as the run waits,
then, for run.js's refetch once the (stand-in) desk socket says the run changed, as it is
after failing. A run
that fails while its page is open swaps "Retry" in where "Cancel run" was: a click meant for
Cancel must not restart the run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.conf import settings
from django.templatetags.static import static
from django.test import Client
from playwright.sync_api import expect

from reviewdesk.runs.models import ErrorKind
from reviewdesk.runs.transitions import run_mark_failed

pytestmark = pytest.mark.e2e

CHROMIUM = "/usr/bin/chromium"
ORIGIN = "http://localhost:8932"
# run.js opens the desk socket: here one the test drives through window.__socket.
FAKE_SOCKET = """
window.WebSocket = class {
  constructor() {
    window.__socket = this;
    setTimeout(() => this.onopen && this.onopen(), 0);
  }
  send() {}
  close() {}
};
"""


def test_retry_swapped_in_where_cancel_was_takes_no_click_for_a_moment(interrupted_run, personas):
    run, _ = interrupted_run()
    client = Client()
    client.force_login(personas.carol)
    path = f"/runs/{run.id}/"
    script_url = f"{ORIGIN}{static('desk/run.js')}"
    waiting = client.get(path).content.decode()
    run_mark_failed(run, "the model gave up", kind=ErrorKind.INTERNAL)  # saved with its row
    pages = [waiting, client.get(path).content.decode()]  # the second: Retry, no Cancel
    assert 'id="cancel-run"' in pages[0] and 'id="retry-run"' in pages[1]
    posted: list[str] = []

    def serve(route) -> None:
        url = route.request.url
        if route.request.method == "POST":
            posted.append(url)
            route.fulfill(status=200, body="<p>posted natively</p>", content_type="text/html")
        elif url == f"{ORIGIN}{path}":  # as the run waits, then as it is once failed
            route.fulfill(body=pages.pop(0) if len(pages) > 1 else pages[0], content_type="text/html")
        elif url == script_url:
            body = (Path(settings.BASE_DIR) / "static/desk/run.js").read_text()
            route.fulfill(body=body, content_type="application/javascript")
        else:
            route.fulfill(status=404, body="")

    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "install Debian's chromium (.ci/run does it with apt-get)"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"], headless=True)
        try:
            page = browser.new_page()
            page.route(f"{ORIGIN}/**", serve)
            page.add_init_script(FAKE_SOCKET)
            page.goto(f"{ORIGIN}{path}")
            expect(page.locator("#cancel-run")).to_be_enabled()
            page.wait_for_function("() => Boolean(window.__socket && window.__socket.onmessage)")

            message = {"type": "run.updated", "seq": 10**6, "data": {"id": str(run.id), "status": "failed"}}
            page.evaluate(f"window.__socket.onmessage({{ data: {json.dumps(json.dumps(message))} }})")

            retry = page.locator("#retry-run")
            expect(retry).to_be_attached()
            expect(retry).to_be_disabled()  # where Cancel was, a moment ago
            retry.click(force=True)  # the click meant for Cancel
            expect(retry).to_be_enabled(timeout=3_000)  # then it works
        finally:
            browser.close()
    assert posted == []  # nothing was retried
