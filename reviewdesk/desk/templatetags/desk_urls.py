"""A card's links, written the way desk_card.js writes a live card's: the view reverses each URL once
per page with PLACEHOLDER for the id (`run_url`, `approval_url`), and `{{ pattern|url_for:id }}`
puts an id in its place, as desk_card.js's urlFor does with the same patterns. A `{% url %}` per link
per card reversed the same route twenty times a page (the desk at 10,000 pending,
whose page holds twice the cards it holds at 10)."""

from __future__ import annotations

from urllib.parse import quote

from django import template

register = template.Library()

# A UUID, so that the routes' <uuid:...> converters take it when the view reverses them.
PLACEHOLDER = "00000000-0000-0000-0000-000000000000"


@register.filter
def url_for(pattern: str, object_id: object) -> str:
    # encodeURIComponent's counterpart: an id is a UUID, but nothing here relies on it.
    return pattern.replace(PLACEHOLDER, quote(str(object_id), safe=""))
