"""Ids as a reviewer reads them: the first eight characters, the whole id one click away.

A UUID or a 64-hex hash on its own line is noise to someone deciding; eight characters tell
two runs apart on one page. `{% short_id value %}` shows them in `<code>` with the full id in
its title, and a copy button (static/desk/copy_id.js) that puts the full id on the clipboard;
`{{ value|short }}` is the same eight characters as plain text (a title, a notice).
"""

from __future__ import annotations

import re

from django import template
from django.utils.html import format_html

register = template.Library()

SHORT = 8


@register.filter
def short(value: object) -> str:
    """The first eight characters of an id, with an ellipsis when there were more."""
    text = str(value)
    return text if len(text) <= SHORT else f"{text[:SHORT]}…"


@register.simple_tag
def short_id(value: object, what: str = "id", href: str = "") -> str:
    """`<code>` with the id's first eight characters (the whole id in its title), a link to
    `href` when given, and a button that copies the whole id; `what` names it for a screen
    reader ("run", "approval")."""
    full = str(value)
    if len(full) <= SHORT:
        return format_html('<code class="short-id">{}</code>', full)
    code = format_html('<code title="{}">{}</code>', full, full[:SHORT])
    if href:
        code = format_html('<a href="{}">{}</a>', href, code)
    return format_html(
        '<span class="short-id">{}<button type="button" class="copy-id" data-copy="{}"'
        ' aria-label="Copy the full {} id, {}…" title="Copy the full {} id">copy</button></span>',
        code,
        full,
        what,
        full[:SHORT],
        what,
    )


UUID = re.compile(r"\b([0-9a-f]{8})-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.IGNORECASE)


@register.filter
def short_ids(text: object) -> str:
    """`text` with every UUID in it cut to its first eight characters (a notice quoting a run):
    plain text, escaped by the template like any other."""
    return UUID.sub(r"\1…", str(text))
