"""The writers' lock (reviewdesk/lib/db.py): audit rows and desk events commit in id order.

Two real connections on PostgreSQL (the lock is an advisory lock there; SQLite serialises
every writing transaction by itself): a second writer waits while the first holds its
transaction open, and appends after it once it commits. The lock is taken once per
transaction, and again in the next one, whether the last committed or rolled back.
"""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, connections, transaction

from reviewdesk.audit.models import AuditEvent
from reviewdesk.audit.services import audit_record
from reviewdesk.audit.verification import audit_check
from reviewdesk.events.models import DeskEvent
from reviewdesk.events.services import event_emit
from reviewdesk.lib.db import serialize_writers

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif("connection.vendor != 'postgresql'", reason="SQLite serialises every writer"),
]

BLOCKED_WITHIN = 10  # seconds for the second writer to be seen waiting (at once, unless broken)


class Holder(threading.Thread):
    """Runs `write` in a transaction on its own connection, then holds the transaction open
    until released (a writer slow to commit)."""

    def __init__(self, write) -> None:
        super().__init__(daemon=True)
        self.write = write
        self.written = threading.Event()
        self.release = threading.Event()
        self.result = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with transaction.atomic():
                self.result = self.write()
                self.written.set()
                assert self.release.wait(30), "never released"
        except BaseException as exc:  # reported by the test
            self.error = exc
            self.written.set()
        finally:
            connections.close_all()


class Writer(threading.Thread):
    """Runs `write` in a transaction on its own connection and says when it has committed."""

    def __init__(self, write) -> None:
        super().__init__(daemon=True)
        self.write = write
        self.done = threading.Event()
        self.result = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with transaction.atomic():
                self.result = self.write()
        except BaseException as exc:
            self.error = exc
        finally:
            self.done.set()
            connections.close_all()


def a_writer_is_blocked() -> bool:
    """Whether a backend of this test database is waiting on a lock another one holds: the
    server's own word that a writer waits, where "it has not finished yet" could only mean
    that it is slow."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_stat_activity"
            " WHERE datname = current_database() AND cardinality(pg_blocking_pids(pid)) > 0)"
        )
        return bool(cursor.fetchone()[0])


def seen_waiting(second: Writer) -> bool:
    """Whether `second` is seen blocked by a lock before it finishes (False once it finished
    without waiting, or after BLOCKED_WITHIN seconds)."""
    deadline = time.monotonic() + BLOCKED_WITHIN
    while not second.done.is_set() and time.monotonic() < deadline:
        if a_writer_is_blocked():
            return not second.done.is_set()
        time.sleep(0.01)
    return False


def waits_for(holder: Holder, write) -> Writer:
    """Start `write` while `holder` holds its transaction open; check it waits for the
    holder's commit, release the holder, and return the second writer once it is done."""
    assert holder.written.wait(30) and holder.error is None, holder.error
    second = Writer(write)
    second.start()
    waited = seen_waiting(second)
    holder.release.set()
    holder.join(30)
    assert second.done.wait(30) and second.error is None, second.error
    assert waited, "the second writer did not wait for the first one's commit"
    return second


def audit(action: str):
    return lambda: audit_record(actor=None, action=action, subject_type="test", subject_id=action)


def emit(kind: str):
    return lambda: event_emit(type=kind, data={}, audience=[])


def test_a_second_audit_writer_waits_and_chains_onto_the_first_ones_row():
    first = Holder(audit("first"))
    first.start()
    second = waits_for(first, audit("second"))

    a, b = first.result, second.result
    assert b.prev_hash == a.hash and b.pk > a.pk
    assert list(AuditEvent.objects.order_by("id").values_list("action", flat=True)) == ["first", "second"]
    assert audit_check().intact


def test_a_second_event_writer_waits_for_the_first_events_commit():
    first = Holder(emit("first"))
    first.start()
    second = waits_for(first, emit("second"))

    assert second.result.id > first.result.id
    assert list(DeskEvent.objects.order_by("id").values_list("type", flat=True)) == ["first", "second"]


def test_an_event_writer_waits_for_an_audit_writer_and_the_other_way_round():
    """One lock for both appends: a transaction holding either holds the other's writers too."""
    first = Holder(audit("first"))
    first.start()
    waits_for(first, emit("second"))
    first = Holder(emit("third"))
    first.start()
    waits_for(first, audit("fourth"))


def test_the_lock_is_taken_again_in_the_next_transaction_after_a_commit_or_a_rollback():
    class Reused(Holder):
        """On one connection: a locking transaction committed, another rolled back, then the
        append in a third, held open."""

        def run(self) -> None:
            try:
                with transaction.atomic():
                    serialize_writers()
                with pytest.raises(RuntimeError), transaction.atomic():
                    serialize_writers()
                    raise RuntimeError("rolled back")
            except BaseException as exc:
                self.error = exc
                self.written.set()
                return
            super().run()

    first = Reused(audit("held"))
    first.start()
    second = waits_for(first, audit("after"))
    assert second.result.prev_hash == first.result.hash


def test_the_lock_is_taken_again_after_the_savepoint_that_took_it_rolls_back():
    class Savepoint(Holder):
        def run(self) -> None:
            try:
                with transaction.atomic():
                    try:
                        with transaction.atomic():  # a savepoint
                            serialize_writers()
                            raise RuntimeError("rolled back to the savepoint")
                    except RuntimeError:
                        pass
                    self.result = audit_record(actor=None, action="held", subject_type="t", subject_id="1")
                    self.written.set()
                    assert self.release.wait(30), "never released"
            except BaseException as exc:
                self.error = exc
                self.written.set()
            finally:
                connections.close_all()

    first = Savepoint(audit("unused"))
    first.start()
    second = waits_for(first, audit("after"))
    assert second.result.prev_hash == first.result.hash


def test_a_transaction_appending_audit_rows_and_events_takes_the_lock_once():
    """The audit rows and the events of one transaction share one acquisition (one round trip,
    as when an approval is raised); the next transaction takes it again."""
    locks: list[str] = []

    def tap(execute, sql, params, many, context):
        if "pg_advisory_xact_lock" in sql:
            locks.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(tap):
        with transaction.atomic():
            audit_record(actor=None, action="one", subject_type="test", subject_id="1")
            event_emit(type="one", data={}, audience=[])
            audit_record(actor=None, action="two", subject_type="test", subject_id="2")
        with transaction.atomic():
            event_emit(type="three", data={}, audience=[])
    assert len(locks) == 2, locks
    assert audit_check().intact
