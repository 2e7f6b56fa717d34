"""Small database helpers shared by the apps."""

from __future__ import annotations

import zlib

from django.db import connection
from django.db.models import QuerySet


def serialize_writers(name: str) -> None:
    """Hold a transaction-scoped lock named `name` until commit.

    Used where rows must be committed in id order (desk event sequence, audit
    hash chain). On PostgreSQL this is an advisory lock; SQLite in IMMEDIATE
    mode already serialises every writing transaction.
    """
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [zlib.crc32(name.encode())])


def ids_naming(rows: QuerySet, field: str, username: str) -> list:
    """Ids of `rows` whose JSON list `field` contains `username`.

    JSON containment is not portable to SQLite, so this reads the ids and lists of
    the rows whose list is not empty and filters here; such lists are short.
    """
    return [pk for pk, names in rows.exclude(**{field: []}).values_list("id", field) if username in names]
