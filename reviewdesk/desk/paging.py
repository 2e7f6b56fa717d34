"""Offset paging for the desk's lists: the page size, the query string that keeps the filters."""

from __future__ import annotations

from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.http import urlencode

from reviewdesk.db import comparable_text

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
# full COUNT(*) at 100,000 runs cost the runs page ~300 ms on PostgreSQL (issue 11, #9).
COUNT_CAP = 1000


def paged(request: HttpRequest, rows: QuerySet, kept: dict[str, str], size: int = LIST_PAGE_SIZE) -> dict:
    """One page of `rows` from the URL's offset, in two queries (count and slice), with links
    to the pages either side that keep the filters in `kept`. The count stops COUNT_CAP rows
    past this page: then `total` is that bound and `total_capped` is true ("1050+")."""
    offset = page_offset(request)
    cap = offset + size + COUNT_CAP
    total = rows.order_by()[: cap + 1].count()  # a count needs no order: no sort inside it
    page = list(rows[offset : offset + size])
    return {
        "rows": page,
        "total": min(total, cap),
        "total_capped": total > cap,
        "first": offset + 1,
        "last": offset + len(page),
        "prev_query": urlencode({**kept, "offset": max(0, offset - size)}) if offset > 0 else None,
        "next_query": urlencode({**kept, "offset": offset + size}) if offset + size < total else None,
    }
