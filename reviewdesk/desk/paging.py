"""Offset paging for the desk's lists: the page size, the query string that keeps the filters."""

from __future__ import annotations

from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.http import urlencode

# What the decision templates compare with and limit to, so that they spell no enum value or limit.


def page_offset(request: HttpRequest) -> int:
    try:
        return max(0, int(request.GET.get("offset", 0)))
    except ValueError:
        return 0


LIST_PAGE_SIZE = 50


def paged(request: HttpRequest, rows: QuerySet, kept: dict[str, str], size: int = LIST_PAGE_SIZE) -> dict:
    """One page of `rows` from the URL's offset, in two queries (count and slice), with links
    to the pages either side that keep the filters in `kept`."""
    total = rows.count()
    offset = page_offset(request)
    page = list(rows[offset : offset + size])
    return {
        "rows": page,
        "total": total,
        "first": offset + 1,
        "last": offset + len(page),
        "prev_query": urlencode({**kept, "offset": max(0, offset - size)}) if offset > 0 else None,
        "next_query": urlencode({**kept, "offset": offset + size}) if offset + size < total else None,
    }
