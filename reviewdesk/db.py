"""Small database helpers shared by the apps."""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from typing import Any

from django.db import NotSupportedError, connection
from django.db.models import BooleanField, Func


def serialize_writers(name: str) -> None:
    """Hold a transaction-scoped lock named `name` until commit.

    Used where rows must be committed in id order (desk event sequence, audit
    hash chain). On PostgreSQL this is an advisory lock; SQLite in IMMEDIATE
    mode already serialises every writing transaction.
    """
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [zlib.crc32(name.encode())])


class NamesAny(Func):
    """True where the JSON list of strings in `field` holds one of `names`, matched exactly in
    the database (jsonb `?|` on PostgreSQL, json_each on SQLite): a condition on each row, so
    a visibility check reads no list of every assigned row's id first (issue 11)."""

    output_field = BooleanField()
    conditional = True

    def __init__(self, field: str, names: Iterable[str]) -> None:
        self.names = sorted(set(names))
        super().__init__(field)

    def as_sql(self, compiler: Any, connection: Any, **extra: Any) -> tuple[str, list]:  # type: ignore[override]
        column, params = compiler.compile(self.source_expressions[0])
        if not self.names:
            return "1 = 0", []
        if connection.vendor == "postgresql":
            return f"({column} ?| %s::text[])", [*params, self.names]  # a jsonb array's strings
        if connection.vendor == "sqlite":
            marks = ", ".join(["%s"] * len(self.names))
            sql = f"EXISTS (SELECT 1 FROM json_each({column}) WHERE json_each.value IN ({marks}))"
            return sql, [*params, *self.names]
        raise NotSupportedError(f"NamesAny: no SQL for {connection.vendor}")
