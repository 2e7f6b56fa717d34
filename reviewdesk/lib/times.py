"""Timestamps as the desk shows and serves them."""

from __future__ import annotations

from datetime import datetime


def iso(value: datetime | None) -> str | None:
    """RFC 3339 in UTC with a Z, as every timestamp the desk shows or signs; always with its
    microseconds, so the strings sort as the times do (Python drops a zero fraction: "...:11Z"
    sorted after "...:11.287206Z")."""
    return value.isoformat(timespec="microseconds").replace("+00:00", "Z") if value else None
