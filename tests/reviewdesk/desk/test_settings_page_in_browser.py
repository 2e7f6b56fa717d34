"""In headless Chromium: a reviewer's settings page (`/settings/`), as Django's test client
renders it, with the desk's stylesheet: axe-core finds no violation at desktop or phone width,
as the page first shows and with its errors, and the controls are reached by their labels.
Screenshots: var/screenshots/settings-{shown,refused}-{1280,390}.png."""

from __future__ import annotations

from pathlib import Path

import pytest
from axe_playwright_python.sync_playwright import Axe
from django.conf import settings
from django.templatetags.static import static
from django.test import Client

from tests.reviewdesk.desk.chromium import routed_page

pytestmark = [pytest.mark.e2e, pytest.mark.django_db]

ORIGIN = "http://localhost:8933"
SHOTS = Path(settings.BASE_DIR) / "var" / "screenshots"


def violations_of(html: str, name: str) -> dict[int, list[str]]:
    """axe's violations by viewport width; the page photographed at each, under var/screenshots/."""
    css = (Path(settings.BASE_DIR) / "static/desk/desk.css").read_text()

    def serve(route) -> None:
        url = route.request.url
        if url == f"{ORIGIN}/settings/":
            route.fulfill(body=html, content_type="text/html")
        elif url == f"{ORIGIN}{static('desk/desk.css')}":
            route.fulfill(body=css, content_type="text/css")
        else:
            route.fulfill(status=404, body="")

    found = {}
    with routed_page(ORIGIN, serve, path="/settings/") as page:
        for width in (1280, 390):
            page.set_viewport_size({"width": width, "height": 844})
            found[width] = [v["id"] for v in Axe().run(page).response["violations"]]
            SHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SHOTS / f"settings-{name}-{width}.png"), full_page=True)
        page.get_by_label("One mail per item, as it arrives").check()
        page.get_by_label("for an item assigned to me by name").uncheck()
        page.get_by_label("Digest at most every").fill("15")
        assert page.locator("input[name=mode]:checked").get_attribute("value") == "every"
    return found


def test_the_settings_page_has_no_accessibility_violation_as_shown_and_with_its_errors(personas):
    alice = Client()
    alice.force_login(personas.alice)
    shown = alice.get("/settings/").content.decode()
    refused = alice.post("/settings/", {"mode": "digest", "digest_minutes": "0"})
    assert refused.status_code == 422

    assert violations_of(shown, "shown") == {1280: [], 390: []}
    assert violations_of(refused.content.decode(), "refused") == {1280: [], 390: []}
