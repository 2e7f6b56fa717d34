"""In headless Chromium: static/desk/shown.js, which escapes what the live pages draw (a card
desk.js builds, a preview approval.js redraws), shows each text exactly as the template
filters it mirrors (reviewdesk/desk/templatetags/desk_json.py) show it on the served pages."""

from __future__ import annotations

import json

import pytest

from reviewdesk.desk.templatetags.desk_json import exact, has_invisible, shown_json, visible
from tests.reviewdesk.desk.chromium import desk_scripts, routed_page

pytestmark = pytest.mark.e2e

ORIGIN = "http://shown.test"
PAGE = (
    '<!doctype html><html lang="en"><title>shown</title><script src="/static/desk/shown.js"></script></html>'
)

TEXTS = [
    "plain words, two  spaces, é, 東京 and 😀",
    "bidi\u202eoverride, zero\u200bwidth, bom\ufeff, bell\x07, c1\x85, tag\U000e0041",
    "variation\ufe0f selectors\U000e0100 and \u2764\ufe0f",
    "Hangul\u115ffillers\u1160\u3164\uffa0",
    "no-break\u00a0thin\u2009narrow\u202fideographic\u3000figure\u2007 spaces",
    "cgj\u034f mongolian\u180b khmer\u17b4 braille\u2800",
    "Your refund ",
    "  leading, trailing\t",
    "line one \t\nline two\n  indented\r\nend ",
    "",
]


def test_shown_js_escapes_every_text_as_the_template_filters_do():
    values = [{"k": t, t: [t, 1, None, True]} for t in TEXTS if t]
    with routed_page(ORIGIN, serve(), init="") as page:
        page.wait_for_function("window.DeskShown !== undefined")
        live = page.evaluate(
            """([texts, values]) => ({
                visible: texts.map(window.DeskShown.visible),
                exact: texts.map(window.DeskShown.exact),
                hasInvisible: texts.map(window.DeskShown.hasInvisible),
                shownJson: values.map(window.DeskShown.shownJson),
            })""",
            [TEXTS, values],
        )
    assert live["visible"] == [visible(t) for t in TEXTS]
    assert live["exact"] == [exact(t) for t in TEXTS]
    assert live["hasInvisible"] == [has_invisible(t) for t in TEXTS]
    assert live["shownJson"] == [shown_json(v) for v in values]
    assert [json.loads(s) for s in live["shownJson"]] == values  # still JSON, read back the same


def serve():
    files = {f"{ORIGIN}/": (PAGE, "text/html"), **desk_scripts(ORIGIN, ("shown.js",))}

    def answer(route) -> None:
        body, content_type = files.get(route.request.url, ("", "text/plain"))
        route.fulfill(body=body, content_type=content_type, status=200 if body else 404)

    return answer
