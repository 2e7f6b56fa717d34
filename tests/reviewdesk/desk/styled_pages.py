"""Pages as a reviewer sees them, in headless Chromium: rendered by Django's test client,
served with the desk's own stylesheet and scripts (every file under static/desk/), at a given
window size, so a test can measure what fits on the first screen and what a phone shows.

The desk socket is a stand-in that sends nothing unless the test says (`init`); a POST to the
page is answered with a stub and kept in `posted`. Screenshots go to the repository's
var/screenshots/, for a person to look at after the run.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings
from django.templatetags.static import static
from django.test import Client

from tests.reviewdesk.desk.chromium import routed_page

SHOTS = Path(settings.BASE_DIR) / "var" / "screenshots"
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
# The desk socket: sends window.__snapshot (if any) once, and nothing else.
QUIET_SOCKET = """
window.WebSocket = class {
  constructor() {
    window.__socket = this;
    if (window.__snapshot) setTimeout(() => this.onmessage({ data: JSON.stringify(window.__snapshot) }), 0);
  }
  send() {}
  close() {}
};
"""


def static_files(origin: str) -> dict[str, tuple[str, str]]:
    """Every file of static/desk/ by the URL a page asks for it at: {url: (body, type)}."""
    kinds = {".js": "application/javascript", ".css": "text/css"}
    root = Path(settings.BASE_DIR) / "static" / "desk"
    return {
        f"{origin}{static('desk/' + p.name)}": (p.read_text(), kinds[p.suffix])
        for p in root.iterdir()
        if p.suffix in kinds
    }


@contextmanager
def styled_page(
    user,
    path: str,
    *,
    origin: str,
    viewport: dict,
    init: str = "",
    snapshot: dict | None = None,
    posted: list | None = None,
    html: str | None = None,
    **options,
) -> Iterator:
    """`path` as `user` sees it (or `html`, served at `path`), with the desk's CSS and scripts,
    in a window of `viewport`; yielded once loaded. `options` go to Playwright's new_page."""
    if html is None:
        client = Client()
        client.force_login(user)
        response = client.get(path)
        assert response.status_code == 200, response.status_code
        html = response.content.decode()
    files = {f"{origin}{path}": (html, "text/html"), **static_files(origin)}

    def serve(route) -> None:
        if route.request.method == "POST":
            if posted is not None:
                posted.append(route.request.post_data or "")
            route.fulfill(status=200, body="<p>posted natively</p>", content_type="text/html")
            return
        body, content_type = files.get(route.request.url, ("", "text/plain"))
        route.fulfill(body=body, content_type=content_type, status=200 if body else 404)

    sends = f"window.__snapshot = {json.dumps(snapshot)};" if snapshot else ""
    touch = viewport["width"] < 640  # a phone: a touch screen, no hover
    with routed_page(
        origin,
        serve,
        path=path,
        init=sends + init + QUIET_SOCKET,
        viewport=viewport,
        has_touch=touch,
        **options,
    ) as page:
        yield page


def shoot(page, name: str) -> Path:
    """The page's first screen and the whole page, as var/screenshots/<name>.png and
    <name>-full.png."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"))
    page.screenshot(path=str(SHOTS / f"{name}-full.png"), full_page=True)
    return SHOTS / f"{name}.png"


def visible_height(page, selector: str) -> float:
    """How many CSS pixels of `selector` are on the first screen and not under a fixed or
    sticky element drawn over it (the decision bar): sampled down its middle, every 2 px."""
    return page.evaluate(
        """(selector) => {
          const el = document.querySelector(selector);
          const box = el.getBoundingClientRect();
          const x = box.left + Math.min(box.width / 2, 40);
          let seen = 0;
          for (let y = Math.max(0, box.top); y < Math.min(box.bottom, innerHeight); y += 2) {
            const hit = document.elementFromPoint(x, y);
            if (hit && (hit === el || el.contains(hit))) seen += 2;
          }
          return seen;
        }""",
        selector,
    )


def axe_violations(page) -> list[str]:
    """axe-core's violations on the page as it stands (every impact), one line each."""
    from axe_playwright_python.sync_playwright import Axe

    return [
        f"{v['id']} ({v['impact']}): {[n['target'] for n in v['nodes']][:3]}"
        for v in Axe().run(page).response["violations"]
    ]
