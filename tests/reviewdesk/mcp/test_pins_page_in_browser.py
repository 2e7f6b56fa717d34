"""In headless Chromium, on pages served by Django's live server (in this process, on the test
database): an admin follows the desk's notice to `/mcp/`, reads the changed tool's old and new
definitions, and accepts; axe finds no serious or critical violation on the page. The page is
photographed at 1280x800 and 390x844 under var/screenshots/ (mcp-pins-*.png)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from axe_playwright_python.sync_playwright import Axe
from django.db import connections

from agents.mcp import PinState
from reviewdesk.mcp.models import ToolPin
from reviewdesk.mcp.pins import DjangoPinStore
from tests.reviewdesk.desk.chromium import CHROMIUM
from tests.reviewdesk.mcp.pins import DELETE, READ, READ_CHANGED, SERVER

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SHOTS = Path(__file__).resolve().parents[3] / "var" / "screenshots"
SIZES = {"1280": (1280, 800), "phone": (390, 844)}


def off_the_loop(call):
    """`call()` in a thread of its own: Playwright's sync API runs an event loop in this one,
    where Django refuses to touch the database."""

    def body():
        try:
            return call()
        finally:
            connections.close_all()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(body).result()


@pytest.fixture
def changed(personas):
    """read_file pinned, then served with another description; the admin's password set."""
    store = DjangoPinStore()
    store.reconcile(SERVER, [READ, DELETE])
    store.reconcile(SERVER, [READ_CHANGED, DELETE])
    personas.admin.set_password("admin-password")
    personas.admin.save()
    return store


@pytest.fixture
def browser(changed):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"], headless=True)
        yield browser
        browser.close()


def test_an_admin_follows_the_notice_reads_the_change_and_accepts_it(live_server, changed, browser):
    page = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
    page.goto(f"{live_server.url}/accounts/login/?next=/")
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", "admin-password")
    page.click("button[type=submit]")

    notice = page.wait_for_selector(".mcp-notice")
    assert "MCP tool definitions changed: 1 tool on server files" in notice.text_content()
    page.click(".mcp-notice a")
    page.wait_for_selector("#review-files-read_file")
    assert page.text_content("pre.json.old").startswith(READ.description)
    assert page.text_content("pre.json.new").startswith(READ_CHANGED.description)
    assert page.text_content(".mcp-diff .added").startswith("+ Read a file. Before answering")

    violations = []
    SHOTS.mkdir(parents=True, exist_ok=True)
    for label, (width, height) in SIZES.items():
        page.set_viewport_size({"width": width, "height": height})
        page.screenshot(path=str(SHOTS / f"mcp-pins-{label}.png"), full_page=True)
        violations += [
            (label, v["id"], v["impact"], [n["target"] for n in v["nodes"]])
            for v in Axe().run(page).response["violations"]
            if v["impact"] in ("serious", "critical")
        ]
    assert violations == []

    page.set_viewport_size({"width": 1280, "height": 800})
    page.click("#review-files-read_file button.approve")
    flash = page.wait_for_selector(".flash.success")
    assert "Accepted the definition files serves now for read_file" in flash.text_content()
    assert page.get_attribute("tr[data-tool=read_file]", "data-state") == "pinned"
    assert off_the_loop(lambda: ToolPin.objects.get(tool="read_file").digest) == READ_CHANGED.digest
    assert (
        off_the_loop(lambda: changed.reconcile(SERVER, [READ_CHANGED, DELETE]))["read_file"]
        == PinState.PINNED
    )
