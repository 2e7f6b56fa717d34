"""JSON on pages, written as JSON (never as a Python repr), and escaped like any other text.

`{{ value|pretty_json }}` for a value the desk holds (arguments, audit data);
`{{ text|pretty_json_text }}` for JSON that arrives as text (a model's tool-call
arguments, a tool's result), re-indented when it parses and shown as written when
it does not. Both return plain strings, so autoescaping still applies.

What a reviewer reads is escaped where it could deceive (below, "what you sign is what you
see"): `visible` for prose and names, `exact` for a value that is sent or signed,
`shown_json` / `shown_json_text` / `shown_canonical` for JSON.
"""

from __future__ import annotations

import json
import re
import unicodedata
from typing import Any

from django import template

register = template.Library()


@register.filter
def pretty_json(value: Any) -> str:
    # Keys keep their order (the order the agent or the reviewer wrote them in), and
    # non-ASCII stays readable; the browser's JSON.stringify(value, null, 2) matches it.
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False)


@register.filter
def ascii_json(value: Any) -> str:
    # For a data attribute batch.js parses: invisible characters never reach the page raw.
    # desk_card.js writes the same text for a live card (JSON.stringify, then \uXXXX past ASCII).
    return json.dumps(value, indent=2, ensure_ascii=True, sort_keys=False)


@register.filter
def pretty_json_text(text: Any) -> str:
    if not isinstance(text, str):
        return pretty_json(text)
    try:
        return pretty_json(json.loads(text))
    except ValueError:
        return text


# --- what you sign is what you see --------------------------------------------------------
# Characters that change how text reads without being seen, or that pass for an ordinary
# space: format characters (bidi embeddings, overrides and isolates, zero-width ones, the BOM,
# tags, ...), controls other than newline and tab, the line and paragraph separators, every
# space but the ASCII one (no-break, thin, ideographic, ...), and the default-ignorable code
# points outside those categories (variation selectors, Hangul fillers, the combining grapheme
# joiner, ...) with the blank braille cell, which draws as a space. Shown as \uXXXX, never as
# is. static/desk/shown.js holds the same rule for the live pages.
INVISIBLE_CATEGORIES = frozenset({"Cf", "Cc", "Zl", "Zp", "Zs"})
KEPT = frozenset("\n\t ")
INVISIBLE_RANGES = (
    (0x034F, 0x034F),  # combining grapheme joiner
    (0x115F, 0x1160),  # Hangul choseong and jungseong fillers
    (0x17B4, 0x17B5),  # Khmer inherent vowels
    (0x180B, 0x180F),  # Mongolian free variation selectors (U+180E is Cf)
    (0x2065, 0x2065),  # unassigned, default-ignorable
    (0x2800, 0x2800),  # braille pattern blank
    (0x3164, 0x3164),  # Hangul filler
    (0xFE00, 0xFE0F),  # variation selectors
    (0xFFA0, 0xFFA0),  # halfwidth Hangul filler
    (0xFFF0, 0xFFF8),  # unassigned, default-ignorable
    (0xE0000, 0xE0FFF),  # tags (Cf), variation selectors supplement, the block's unassigned rest
)
INVISIBLE_OTHERS = frozenset(chr(c) for first, last in INVISIBLE_RANGES for c in range(first, last + 1))

# In ASCII text only the controls are invisible: a regex finds them without a call per character.
ASCII_INVISIBLE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")

# A value's own spaces and tabs that no page can show: at its start, at its end, or before a
# line break. Those between words are left alone, and so is a later line's indentation.
EDGE_WHITESPACE = re.compile(r"\A[ \t]+|[ \t]+(?=[\r\n]|\Z)")
# In JSON text: a string token, and (inside one) the spaces at its edges or before an escaped
# line break (a tab is already written `\t` there).
JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
JSON_EDGE_SPACES = re.compile(r"\A +| +(?=\\[nr]|\Z)")


def _invisible(char: str) -> bool:
    return char not in KEPT and (
        unicodedata.category(char) in INVISIBLE_CATEGORIES or char in INVISIBLE_OTHERS
    )


def _holds_invisible(text: str) -> bool:
    if text.isascii():
        return ASCII_INVISIBLE.search(text) is not None
    return any(_invisible(c) for c in text)


def _escape_char(char: str) -> str:
    # As JSON writes it (a surrogate pair above U+FFFF), so escaped JSON stays valid JSON.
    data = char.encode("utf-16-be")
    return "".join(f"\\u{int.from_bytes(data[i : i + 2], 'big'):04x}" for i in range(0, len(data), 2))


def _escape_all(match: re.Match[str]) -> str:
    return "".join(_escape_char(c) for c in match.group(0))


def _json_edges_escaped(json_text: str) -> str:
    def string(match: re.Match[str]) -> str:
        return '"' + JSON_EDGE_SPACES.sub(_escape_all, match.group(0)[1:-1]) + '"'

    return JSON_STRING.sub(string, json_text)


@register.filter
def visible(text: Any) -> str:
    """`text` with every invisible character written out as its escape (`\\u202e`). For prose
    (a task, model text, a reviewer's note): its spaces, wherever they are, are shown as typed."""
    text = str(text)
    if not _holds_invisible(text):
        return text
    return "".join(_escape_char(c) if _invisible(c) else c for c in text)


@register.filter
def exact(text: Any) -> str:
    """`visible`, and the spaces and tabs at the edges too (at the start, at the end, before a
    line break: `\\u0020`, `\\u0009`). For a value that is sent or signed (a preview's row, an
    option), where "Refund " and "Refund" must not look alike."""
    return visible(EDGE_WHITESPACE.sub(_escape_all, str(text)))


@register.filter
def has_invisible(value: Any) -> bool:
    """Whether a value (text, or JSON data at any depth) holds something `exact` and
    `shown_json` show escaped: an invisible character, or a space or tab at an edge."""
    if isinstance(value, str):
        return _holds_invisible(value) or EDGE_WHITESPACE.search(value) is not None
    if isinstance(value, dict):
        return any(has_invisible(k) or has_invisible(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(has_invisible(v) for v in value)
    return False


@register.filter
def shown_json(value: Any) -> str:
    """pretty_json with each string's edge spaces and every invisible character escaped: for
    arguments a reviewer signs. Still JSON, read back to the same value (the edit form's text)."""
    return visible(_json_edges_escaped(pretty_json(value)))


@register.filter
def shown_json_text(text: Any) -> str:
    """pretty_json_text, escaped: JSON that arrives as text (a model's call, a tool's result)
    re-indented and shown as `shown_json` shows it; text that is not JSON as `visible` does."""
    if not isinstance(text, str):
        return shown_json(text)
    try:
        return shown_json(json.loads(text))
    except ValueError:
        return visible(text)


@register.filter
def shown_canonical(text: str) -> str:
    """The canonical JSON a decision signs, as written (never re-indented), escaped as
    `shown_json` escapes it."""
    return visible(_json_edges_escaped(text))
