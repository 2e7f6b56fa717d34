"""The statements an action sends that read one table: what the plan tests explain."""

from __future__ import annotations

from collections.abc import Callable

from django.db import connection


def statements_reading(action: Callable[[], object], table: str) -> list[tuple[str, tuple]]:
    """(SQL, params) of each statement `action` sends that reads FROM `table` (as Django quotes it)."""
    seen: list[tuple[str, tuple]] = []

    def record(execute, sql, params, many, context):
        if f'FROM "{table}"' in sql:
            seen.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        action()
    return seen
