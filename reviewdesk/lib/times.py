"""Timestamps as the desk shows and serves them."""

from __future__ import annotations

from datetime import datetime


def rfc3339_sortable(value: datetime | None) -> str | None:
    """RFC 3339 in UTC with a Z, as every timestamp the desk shows and serves (payloads, events,
    webhooks, pages); always with its microseconds, so the strings sort as the times do (Python
    drops a zero fraction: "...:11Z" sorted after "...:11.287206Z").

    Not the form a decision's signed payload writes its times in (`agents.decisions.
    rfc3339_signed`, which drops a zero fraction): that one is fixed by the signatures made
    with it, and sorting is no concern there."""
    return value.isoformat(timespec="microseconds").replace("+00:00", "Z") if value else None
