"""Offset paging for the desk's lists: the page size, the query string that keeps the filters."""

from __future__ import annotations

from django.contrib import messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.http import urlencode

from reviewdesk.lib.db import comparable_text

MAX_OFFSET = 10**9  # past it, an offset is malformed (a 64-bit OFFSET would overflow: a 500)


def filter_text(request: HttpRequest, name: str) -> str:
    """The URL's filter `name` as a list compares it: trimmed, at most 100 characters, a NUL
    matching nothing (`comparable_text`)."""
    return comparable_text(request.GET.get(name, "")).strip()[:100]


def page_offset(request: HttpRequest) -> int:
    try:
        offset = max(0, int(request.GET.get("offset", 0)))
    except ValueError:
        return 0
    return offset if offset <= MAX_OFFSET else 0


LIST_PAGE_SIZE = 50
# Rows counted past the page shown. The runs, audit and grants lists grow with history: a
# full COUNT(*) at 100,000 runs cost the runs page ~300 ms on PostgreSQL (`make bench` #9).
COUNT_CAP = 1000
# The deepest a page may start: 200 pages of 50. Counting and skipping go as far as the page
# asked for, so an offset of a billion walked every row the user may see (to draw nothing);
# capped, the worst request counts MAX_PAGE_OFFSET + a page + COUNT_CAP rows, whatever the
# history. The filters (and the API's cursors) reach rows deeper than that.
MAX_PAGE_OFFSET = 10_000


def paged(request: HttpRequest, rows: QuerySet, kept: dict[str, str], size: int = LIST_PAGE_SIZE) -> dict:
    """One page of `rows` from the URL's offset, in two queries (count and slice), with links
    to the pages either side that keep the filters in `kept`. The count stops COUNT_CAP rows
    past this page: then `total` is that bound and `total_capped` is true ("1050+").

    No page starts past MAX_PAGE_OFFSET, and an offset past the end (where the count is exact)
    is the last page there is; the page says so in a message rather than drawing nothing."""
    asked = page_offset(request)
    offset = min(asked, MAX_PAGE_OFFSET)
    cap = offset + size + COUNT_CAP
    total = rows.order_by()[: cap + 1].count()  # a count needs no order: no sort inside it
    if offset and offset >= total:  # past the end: fewer rows than the cap, so `total` is exact
        offset = min((total - 1) // size * size if total else 0, MAX_PAGE_OFFSET)
    page = list(rows[offset : offset + size])
    more = offset + size < total
    deeper = more and offset + size > MAX_PAGE_OFFSET  # rows follow where no page may start
    if deeper:
        messages.info(
            request,
            f"This list pages no further than row {offset + size:,}: narrow it with the filters to see the rest.",
        )
    elif offset < asked:
        messages.info(request, f"Row {asked + 1:,} is past the end of this list: here is its last page.")
    return {
        "rows": page,
        "total": min(total, cap),
        "total_capped": total > cap,
        "first": offset + 1,
        "last": offset + len(page),
        "prev_query": urlencode({**kept, "offset": max(0, offset - size)}) if offset > 0 else None,
        "next_query": urlencode({**kept, "offset": offset + size}) if more and not deeper else None,
    }
