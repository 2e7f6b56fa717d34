"""Headless Chromium on pages rendered in the test process: every request the page makes is
answered by the test (`serve`), so Chromium is the only other process. Debian's chromium, as
.ci/run installs it; Playwright cannot download its own here."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings
from django.templatetags.static import static

CHROMIUM = "/usr/bin/chromium"


def desk_scripts(origin: str, names: tuple[str, ...], *, held_back: str | None = None) -> dict:
    """static/desk/<name> for each name but `held_back`, by the URL the page asks for them at:
    {url: (body, content type)}."""
    return {
        f"{origin}{static('desk/' + name)}": (
            (Path(settings.BASE_DIR) / "static/desk" / name).read_text(),
            "application/javascript",
        )
        for name in names
        if name != held_back
    }


@contextmanager
def routed_page(origin: str, serve: Callable, *, path: str = "/", init: str = "", **options) -> Iterator:
    """A page in a fresh browser, every request under `origin` answered by `serve(route)`,
    `init` run before the page's own scripts, opened at `origin + path`; `options` go to
    Playwright's new_page (viewport, has_touch, …)."""
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "install Debian's chromium (.ci/run does it with apt-get)"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"], headless=True)
        try:
            page = browser.new_page(**options)
            page.route(f"{origin}/**", serve)
            page.add_init_script(init)
            page.goto(f"{origin}{path}")
            yield page
        finally:
            browser.close()
