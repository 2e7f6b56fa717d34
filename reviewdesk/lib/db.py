"""Database helpers the apps share: the writers' lock (one advisory-lock statement of its own,
the one hand-written statement outside the apps' rows.py) and appends at a block's end
(`atomic_appends_last`), NamesAny and ExistsPerRow (conditions the ORM cannot write), and
small conveniences (prefetched_as, comparable_text)."""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from django.db import NotSupportedError, connection, transaction
from django.db.models import BooleanField, Exists, Func

# The locks of every append whose ids must be commit order: the audit chain (each row hashes
# the one before it) and the desk events (a socket takes a gap in their sequence for a lost
# event). Both keys, as earlier releases took them one at a time, so a process of the release
# before this one still serialises with this one while both run during an upgrade.
WRITERS_LOCKS = (zlib.crc32(b"audit-chain"), zlib.crc32(b"desk-events"))


def serialize_writers() -> None:
    """Hold the desk's writers locks until the current transaction ends.

    Every writer of an audit row or a desk event takes them before it reads the chain's head
    or takes an id, so ids are commit order on both. Taken together, in one statement, once
    per transaction: a transaction appending to both, as raising an approval does,
    pays one round trip instead of two, and always takes them in the same order. On
    PostgreSQL these are transaction-scoped advisory locks; SQLite in IMMEDIATE mode already
    serialises every writing transaction.
    """
    assert connection.in_atomic_block, "serialize_writers needs a transaction"
    if connection.vendor != "postgresql" or _writers_lock_held():
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s), pg_advisory_xact_lock(%s)", list(WRITERS_LOCKS))
    # The mark lives exactly as long as the locks: Django drops its commit hooks when the
    # transaction commits or rolls back, and an atomic block's when that block's savepoint
    # rolls back (each hook carries the savepoints of the blocks it was registered in;
    # PostgreSQL releases the lock there too). A savepoint taken by hand
    # (`transaction.savepoint()`) is carried by no hook: rolled back, it would release the lock
    # and leave the mark, and the next append would skip the lock. So the desk takes none
    # (tests/reviewdesk/lib/test_no_manual_savepoints.py).
    transaction.on_commit(_writers_locked)


def _writers_locked() -> None:
    """The mark `serialize_writers` leaves among the transaction's commit hooks (does nothing)."""


def _writers_lock_held() -> bool:
    return any(hook[1] is _writers_locked for hook in connection.run_on_commit)


@contextmanager
def atomic_appends_last() -> Iterator[None]:
    """`transaction.atomic()`, whose audit rows and desk events are written at the block's end.

    `audit_record` and `event_emit` called in the block queue their rows (`append_later`); the
    block's last statements take the writers' lock and insert them in call order, so the lock
    is held from there to the commit only, not through everything the transaction does after
    its first append (under load, writers queue on that one lock). Ids stay commit
    order, as the lock is still taken before any is allocated. Rows queued inside a savepoint
    that rolls back are dropped with it. Nested blocks queue into the outermost one.
    """
    with transaction.atomic():
        if getattr(connection, "desk_appends", None) is not None:
            yield  # an enclosing block writes them
            return
        connection.desk_appends = pending = []
        try:
            yield
        finally:
            connection.desk_appends = None
        live = _live_hooks()  # once, before the writes: one pass over the hooks, not one per row
        for later in pending:
            if later.committed in live:  # else its savepoint rolled back
                later.write()


class _Later:
    """An append queued by `append_later`: `value` is the written row once the block has
    written it; `committed` is its commit hook."""

    def __init__(self, write: Callable[[], Any], after_commit: Callable[[Any], None] | None) -> None:
        self._write, self._after_commit = write, after_commit
        self.value: Any = None

    def write(self) -> None:
        self.value = self._write()

    def committed(self) -> None:
        if self._after_commit is not None:
            self._after_commit(self.value)


def append_later(write: Callable[[], Any], *, after_commit: Callable[[Any], None] | None = None) -> bool:
    """In an `atomic_appends_last` block: queue `write` for the block's end and say so; else
    False (the caller writes now). `after_commit(row)` is registered as a commit
    hook here, at the call, so it keeps its place among the transaction's other hooks (a
    desk event's push still leaves before the task sent after it); the hook's presence also
    says whether the savepoint around the call survived."""
    pending = getattr(connection, "desk_appends", None)
    if pending is None:
        return False
    later = _Later(write, after_commit)
    transaction.on_commit(later.committed, robust=True)
    pending.append(later)
    return True


def _live_hooks() -> set[Callable[[], None]]:
    """The transaction's commit hooks still registered: Django drops a savepoint's when it
    rolls back."""
    return {entry[1] for entry in connection.run_on_commit}


def comparable_text(value: str) -> str:
    """`value` as a filter may compare it with a text column: U+0000, which PostgreSQL text
    cannot hold (psycopg raises DataError, a 500), reads as U+FFFD, which no stored name or id
    holds either: a filter typed with one matches nothing, on either database."""
    return value.replace("\x00", "\ufffd")


def prefetched_as(instance: Any, relation: str, rows: list[Any]) -> None:
    """Give `instance` its reverse relation `relation` as if prefetched, holding `rows`: for
    rows the caller already has (no query, and no SQL compiled for it)."""
    queryset = getattr(instance, relation).none()
    queryset._result_cache, queryset._prefetch_done = list(rows), True
    cache = getattr(instance, "_prefetched_objects_cache", None)
    if cache is None:
        cache = instance._prefetched_objects_cache = {}
    cache[relation] = queryset


class NamesAny(Func):
    """True where the JSON list of strings in `field` holds one of `names`, matched exactly in
    the database (jsonb `?|` on PostgreSQL, json_each on SQLite): a condition on each row, so
    a visibility check reads no list of every assigned row's id first."""

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


class ExistsPerRow(Exists):
    """EXISTS that PostgreSQL tests row by row, through the subquery's index, as the rows are
    read (`make bench` #9): for an EXISTS under an OR beside cheaper tests, on a list read in order a
    page at a time, where most rows pass before the EXISTS is reached.

    PostgreSQL's planner does not count on that: it prices the test as run once for every row
    of the table and turns it into a hashed subplan, which reads every row the subquery matches
    before the first row is returned (the runs page at 100,000 runs read all 100,000 approvals:
    27 of its 28 ms). A subquery with an OFFSET is never turned into one, and `OFFSET 0` changes
    no result. Not for an EXISTS ANDed with the rest: the same fence stops PostgreSQL from
    joining it as a semi-join, its better plan there. SQLite runs an EXISTS row by row already.
    tests/reviewdesk/runs/test_visibility_plans.py checks the plans."""

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> tuple[str, Any]:
        if self.query.low_mark:  # sliced with an offset of its own: a fence already
            return self.as_sql(compiler, connection, **extra)
        return self.as_sql(compiler, connection, template="EXISTS(%(subquery)s OFFSET 0)", **extra)
