"""Cursor paging for every API list: `{"results": [...], "next": URL or null}`, never a silent cut.

Keyset paging over a total order (a timestamp, then the primary key as tie-break), so a
row is on exactly one page however many share a timestamp, and rows inserted while a
client pages never shift the pages it has not read yet. `next` is null only when the
page holds the last row. The cursor is opaque to clients (base64 of the last row's
sort key); a cursor this API did not issue is 400 `bad_cursor`. Tampering with one
reveals nothing: it only moves the start within the rows the user may already see. A list held
in memory rather than in a table (the loaded agents) pages the same way by name (`name_page`).

Each list's query parameters are declared once, in `api.filters`: an unknown parameter or a bad
value is 400 `bad_parameter`, so a typo in a filter never returns everything unfiltered.
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.db.models import Q, QuerySet
from django.utils.dateparse import parse_datetime
from rest_framework.request import Request
from rest_framework.response import Response

from reviewdesk.lib.errors import BadRequest
from reviewdesk.lib.numbers import whole_number

CURSOR = "cursor"
LIMIT = "limit"


def page_limit(request: Request) -> int:
    raw = request.query_params.get(LIMIT)
    return settings.DESK_API_PAGE_SIZE if raw is None else parse_limit(raw)


def parse_limit(raw: str) -> int:
    maximum = settings.DESK_API_MAX_PAGE_SIZE
    limit = whole_number(raw)
    if limit is None or not 1 <= limit <= maximum:
        raise BadRequest(f"limit must be an integer from 1 to {maximum}", code="bad_parameter")
    return limit


def parse_sequence(raw: str, name: str) -> int:
    sequence = whole_number(raw)
    if sequence is None:
        raise BadRequest(f"{name} must be a non-negative integer sequence number", code="bad_parameter")
    return sequence


def time_filters(query: dict[str, Any], rows: QuerySet, field: str = "created_at") -> QuerySet:
    """`rows` within the `created_after` and `created_before` of a list's parsed query."""
    after, before = query.get("created_after"), query.get("created_before")
    if after:
        rows = rows.filter(**{f"{field}__gte": after})
    if before:
        rows = rows.filter(**{f"{field}__lt": before})
    return rows


def _encode(key: tuple[datetime, uuid.UUID]) -> str:
    raw = json.dumps([key[0].isoformat(), str(key[1])]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode(cursor: str) -> tuple[datetime, uuid.UUID]:
    """The key `_encode` wrote; anything else a client made up is 400, never a 500: a key of
    other types, JSON nested past the parser's depth, a time in no database's range."""
    try:
        stamp, pk = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if not (isinstance(stamp, str) and isinstance(pk, str)):
            raise TypeError(stamp, pk)
        when = parse_datetime(stamp)
        if when is None or when.tzinfo is None:
            raise ValueError(stamp)
        # In UTC, as `filters.TimeFilter` compares (PostgreSQL refuses an offset such as +20:00).
        return when.astimezone(UTC), uuid.UUID(pk)
    except (ValueError, TypeError, OverflowError, RecursionError, binascii.Error, UnicodeDecodeError):
        raise BadRequest("the cursor is not one this API issued", code="bad_cursor") from None


def next_url(request: Request, **replace: str) -> str:
    params = {k: v for k, v in request.query_params.items() if k not in replace}
    params.update(replace)
    return request.build_absolute_uri(request.path) + "?" + urlencode(params)


def keyset_page(
    request: Request,
    rows: QuerySet,
    render: Callable[[list[Any]], list[dict[str, Any]]],
    *,
    field: str = "created_at",
) -> Response:
    """Newest first, ordered by (`field`, pk) descending; one page and the link to the next.
    `render` takes the page's rows at once, so that rows sharing reads share them
    (approvals_page_data); `each(render_one)` for rows that do not. The rows may be models or
    `values()` dicts, which must then hold `field` and the primary key."""
    limit = page_limit(request)
    cursor = request.query_params.get(CURSOR)
    if cursor is not None:
        when, pk = _decode(cursor)
        # The `lte` is implied by the OR, and says it in a form an index can seek on: the page
        # starts at the cursor in (status, created_at, id) order instead of reading every newer row.
        rows = rows.filter(
            Q(**{f"{field}__lte": when}) & (Q(**{f"{field}__lt": when}) | Q(**{field: when, "pk__lt": pk}))
        )
    page = list(rows.order_by(f"-{field}", "-pk")[: limit + 1])
    more = len(page) > limit
    page = page[:limit]
    link = next_url(request, **{CURSOR: _encode(_key_of(page[-1], field, rows))}) if more else None
    return Response({"results": render(page), "next": link})


def _key_of(row: Any, field: str, rows: QuerySet) -> tuple[Any, Any]:
    """The row's place in the order, a model's or a `values()` row's (which names its pk)."""
    if isinstance(row, dict):
        return row[field], row[rows.model._meta.pk.attname]
    return getattr(row, field), row.pk


def each(render: Callable[[Any], dict[str, Any]]) -> Callable[[list[Any]], list[dict[str, Any]]]:
    """A page renderer for `keyset_page` from a renderer of one row."""
    return lambda rows: [render(row) for row in rows]


def sequence_page(request: Request, rows: QuerySet, render: Callable[[Any], dict[str, Any]]) -> Response:
    """Oldest first by sequence after `after`; `next` asks for the rows after this page's last."""
    limit = page_limit(request)
    after = parse_sequence(request.query_params.get("after", "0"), "after")
    page = list(rows.filter(id__gt=after).order_by("id")[: limit + 1])
    more = len(page) > limit
    page = page[:limit]
    link = next_url(request, after=str(page[-1].id)) if more else None
    return Response({"results": [render(row) for row in page], "next": link})


def _encode_name(name: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([name]).encode()).decode().rstrip("=")


def _decode_name(cursor: str) -> str:
    """The name `_encode_name` wrote; anything else is 400 `bad_cursor`, as `_decode` says."""
    try:
        (name,) = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if not isinstance(name, str):
            raise TypeError(name)
        return name
    except (ValueError, TypeError, RecursionError, binascii.Error, UnicodeDecodeError):
        raise BadRequest("the cursor is not one this API issued", code="bad_cursor") from None


def name_page(request: Request, names: Iterable[str], render: Callable[[str], dict[str, Any]]) -> Response:
    """A list held in memory, not in a table (the loaded agents), in name order: the names after
    the cursor's. Names are unique, so each is on exactly one page."""
    limit = page_limit(request)
    ordered = sorted(names)
    cursor = request.query_params.get(CURSOR)
    if cursor is not None:
        after = _decode_name(cursor)
        ordered = [name for name in ordered if name > after]
    page = ordered[:limit]
    link = next_url(request, **{CURSOR: _encode_name(page[-1])}) if len(ordered) > limit else None
    return Response({"results": [render(name) for name in page], "next": link})
