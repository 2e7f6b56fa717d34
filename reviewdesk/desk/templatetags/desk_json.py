"""JSON on pages, written as JSON (never as a Python repr), and escaped like any other text.

`{{ value|pretty_json }}` for a value the desk holds (arguments, audit data);
`{{ text|pretty_json_text }}` for JSON that arrives as text (a model's tool-call
arguments, a tool's result), re-indented when it parses and shown as written when
it does not. Both return plain strings, so autoescaping still applies.
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
    # desk.js writes the same text for a live card (JSON.stringify, then \uXXXX past ASCII).
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
# Characters that change how text reads without being seen: format characters (bidi
# embeddings, overrides and isolates, zero-width ones, the BOM, ...), controls other than
# newline and tab, and the line and paragraph separators. Shown as \uXXXX, never as is.
# static/desk/shown.js holds the same rule for the live pages.
INVISIBLE_CATEGORIES = frozenset({"Cf", "Cc", "Zl", "Zp"})
KEPT = frozenset("\n\t")


# In ASCII text only the controls are invisible: a regex finds them without a call per character.
ASCII_INVISIBLE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def _invisible(char: str) -> bool:
    return char not in KEPT and unicodedata.category(char) in INVISIBLE_CATEGORIES


def _holds_invisible(text: str) -> bool:
    if text.isascii():
        return ASCII_INVISIBLE.search(text) is not None
    return any(_invisible(c) for c in text)


def _escape_char(char: str) -> str:
    # As JSON writes it (a surrogate pair above U+FFFF), so escaped JSON stays valid JSON.
    data = char.encode("utf-16-be")
    return "".join(f"\\u{int.from_bytes(data[i : i + 2], 'big'):04x}" for i in range(0, len(data), 2))


@register.filter
def visible(text: Any) -> str:
    """`text` with every invisible character written out as its escape (`\\u202e`)."""
    text = str(text)
    if not _holds_invisible(text):
        return text
    return "".join(_escape_char(c) if _invisible(c) else c for c in text)


@register.filter
def has_invisible(value: Any) -> bool:
    """Whether a value (text, or JSON data at any depth) holds an invisible character."""
    if isinstance(value, str):
        return _holds_invisible(value)
    if isinstance(value, dict):
        return any(has_invisible(k) or has_invisible(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(has_invisible(v) for v in value)
    return False


@register.filter
def shown_json(value: Any) -> str:
    """pretty_json, then every invisible character escaped: for arguments a reviewer signs."""
    return visible(pretty_json(value))
