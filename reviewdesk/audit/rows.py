"""The audit trail's hand-written SQL: each statement behind one named function, for a reason
given in its docstring (`lib.db_rows` is imported by the apps' `rows.py` modules and nothing
else)."""

from __future__ import annotations

from django.db import NotSupportedError, connection

from reviewdesk.audit.chain import GENESIS
from reviewdesk.audit.models import AuditEvent
from reviewdesk.lib.db_rows import insert


def audit_row_insert(row: AuditEvent) -> AuditEvent:
    """A chain row, inserted whole with its id and hash, under the writers' lock: every audited
    action writes one, and the ORM's INSERT compiled for longer than it ran."""
    return insert(row)


def audit_chain_tail() -> tuple[str, int]:
    """(the newest row's hash, or GENESIS; the id the next row takes), in one statement.

    Call it holding the writers' lock, in a statement of its own after the lock's: the
    statement's snapshot then holds every row committed before, and ids are taken in lock
    order, so id order stays commit order (the chain's order, which `_walk` follows)."""
    table = connection.ops.quote_name(AuditEvent._meta.db_table)
    head = f"SELECT hash FROM {table} ORDER BY id DESC LIMIT 1"
    if connection.vendor == "postgresql":
        next_id = f"nextval(pg_get_serial_sequence('{AuditEvent._meta.db_table}', 'id'))"
    elif connection.vendor == "sqlite":
        # AUTOINCREMENT's counter (never an id used before, even by a deleted row), or past
        # the newest row should the counter be behind it.
        next_id = (
            "MAX(COALESCE((SELECT seq FROM sqlite_sequence WHERE name = %s), 0), "
            f"COALESCE((SELECT MAX(id) FROM {table}), 0)) + 1"
        )
    else:
        raise NotSupportedError(f"audit chain: no id allocation for {connection.vendor}")
    params = [AuditEvent._meta.db_table] if connection.vendor == "sqlite" else []
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT ({head}), {next_id}", params)
        prev, pk = cursor.fetchone()
    return prev or GENESIS, int(pk)
