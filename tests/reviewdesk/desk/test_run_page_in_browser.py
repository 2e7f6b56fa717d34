"""In headless Chromium: the live run page's controls, swapped as the run changes.

The page comes from Django's test client, rendered before Chromium starts: as the run waits,
then, for run.js's refetch once the (stand-in) desk socket says the run changed, as it is
after failing. A run
that fails while its page is open swaps "Retry" in where "Cancel run" was: a click meant for
Cancel must not restart the run.
"""

from __future__ import annotations

import json

import pytest
from django.test import Client
from playwright.sync_api import expect

from reviewdesk.runs.models import ErrorKind
from reviewdesk.runs.transitions import run_mark_failed
from tests.reviewdesk.desk.chromium import desk_scripts, routed_page

pytestmark = pytest.mark.e2e

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


def waiting_then_failed(interrupted_run, personas) -> tuple:
    """A run waiting for approval, its page's path, run.js, and carol's view of the page as the
    run waits (Cancel offered) and once it has failed (Retry, no Cancel): (run, path, scripts,
    [waiting, failed])."""
    run, _ = interrupted_run()
    client = Client()
    client.force_login(personas.carol)
    path = f"/runs/{run.id}/"
    waiting = client.get(path).content.decode()
    run_mark_failed(run, "the model gave up", kind=ErrorKind.INTERNAL)  # saved with its row
    pages = [waiting, client.get(path).content.decode()]
    assert 'id="cancel-run"' in pages[0] and 'id="retry-run"' in pages[1]
    return run, path, desk_scripts(ORIGIN, ("run.js",)), pages


def test_retry_swapped_in_where_cancel_was_takes_no_click_for_a_moment(interrupted_run, personas):
    run, path, scripts, pages = waiting_then_failed(interrupted_run, personas)
    posted: list[str] = []

    def serve(route) -> None:
        url = route.request.url
        if route.request.method == "POST":
            posted.append(url)
            route.fulfill(status=200, body="<p>posted natively</p>", content_type="text/html")
        elif url == f"{ORIGIN}{path}":  # as the run waits, then as it is once failed
            route.fulfill(body=pages.pop(0) if len(pages) > 1 else pages[0], content_type="text/html")
        elif url in scripts:
            body, content_type = scripts[url]
            route.fulfill(body=body, content_type=content_type)
        else:
            route.fulfill(status=404, body="")

    with routed_page(ORIGIN, serve, path=path, init=FAKE_SOCKET) as page:
        expect(page.locator("#cancel-run")).to_be_enabled()
        page.wait_for_function("() => Boolean(window.__socket && window.__socket.onmessage)")

        message = {"type": "run.updated", "seq": 10**6, "data": {"id": str(run.id), "status": "failed"}}
        page.evaluate(f"window.__socket.onmessage({{ data: {json.dumps(json.dumps(message))} }})")

        retry = page.locator("#retry-run")
        expect(retry).to_be_attached()
        expect(retry).to_be_disabled()  # where Cancel was, a moment ago
        retry.click(force=True)  # the click meant for Cancel
        expect(retry).to_be_enabled(timeout=3_000)  # then it works
    assert posted == []  # nothing was retried


def test_a_change_that_arrives_while_a_refresh_is_in_flight_is_fetched_again(interrupted_run, personas):
    """run.js's refresh may have left before the change it is told of committed: a second
    change told while the first refresh is in flight fetches the page once more after it, so
    the page ends as the run is (failed, Retry offered), not as the first refresh found it."""
    run, path, scripts, (waiting, failed) = waiting_then_failed(interrupted_run, personas)
    refreshes: list = []  # run.js's fetches of the page, held until the test answers them

    def serve(route) -> None:
        url = route.request.url
        if url == f"{ORIGIN}{path}" and route.request.resource_type == "document":
            route.fulfill(body=waiting, content_type="text/html")
        elif url == f"{ORIGIN}{path}":
            refreshes.append(route)
        elif url in scripts:
            body, content_type = scripts[url]
            route.fulfill(body=body, content_type=content_type)
        else:
            route.fulfill(status=404, body="")

    def told(seq: int) -> None:
        message = {"type": "run.updated", "seq": seq, "data": {"id": str(run.id), "status": "failed"}}
        page.evaluate(f"window.__socket.onmessage({{ data: {json.dumps(json.dumps(message))} }})")

    def refreshes_reach(count: int) -> None:
        for _ in range(100):
            if len(refreshes) >= count:
                return
            page.wait_for_timeout(50)
        raise AssertionError(f"run.js fetched the page {len(refreshes)} times, not {count}")

    with routed_page(ORIGIN, serve, path=path, init=FAKE_SOCKET) as page:
        page.wait_for_function("() => Boolean(window.__socket && window.__socket.onmessage)")
        told(10**6)
        refreshes_reach(1)
        told(10**6 + 1)  # while the first refresh is in flight
        refreshes[0].fulfill(body=waiting, content_type="text/html")  # it left before the change

        refreshes_reach(2)
        refreshes[1].fulfill(body=failed, content_type="text/html")

        expect(page.locator("#retry-run")).to_be_attached()
        expect(page.locator("#cancel-run")).to_have_count(0)
    assert len(refreshes) == 2
