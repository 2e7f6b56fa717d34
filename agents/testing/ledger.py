"""The side-effect ledger and decision consumption, in memory, with the database's guarantees.

`atomic()` rolls back on an exception (nested blocks too, like savepoints),
`consume` is a compare-and-set, a ledger key can be written only once, and a
status moves only from the status the database's conditional UPDATE names.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Protocol

from agents.gate import CallBinding, LedgerEntry, LedgerStatus
from agents.testing._json import json_copy


class Transactional(Protocol):
    """Something whose state rolls back with the ledger's transactions."""

    def snapshot(self) -> Any: ...

    def restore(self, snapshot: Any) -> None: ...


class LedgerConflict(Exception):
    """A second row for the same idempotency key (the database's unique constraint)."""


@dataclass(frozen=True)
class LedgerRow:
    key: str
    run_id: str
    tool_call_id: str
    tool: str
    status: LedgerStatus
    decision_id: str | None
    result: Any
    retries: int = 0  # transient failures of this call so far
    last_error: str = ""


class InMemoryLedger:
    """The side-effect ledger and decision consumption, in memory (implements `agents.gate.Ledger`).

    `atomic()` snapshots the rows, the consumed decision ids and every resource
    in `resources` (e.g. a `RecordingWorld`, whose refunds are DATABASE effects)
    and restores them all if the block raises; nested blocks behave like
    savepoints. It gives no isolation between threads: it is for tests.
    """

    def __init__(self, *, resources: Iterable[Transactional] = ()) -> None:
        self.rows: dict[str, LedgerRow] = {}
        self.consumed: set[str] = set()
        self.grant_uses: dict[str, list[str]] = {}  # grant id -> the ledger keys of its uses
        self.revoked: set[str] = set()  # revoked grant ids (the desk's `revoked_at`)
        self.resources = list(resources)
        self._lock = threading.RLock()

    @contextmanager
    def atomic(self) -> Iterator[None]:
        with self._lock:
            saved = (
                dict(self.rows),
                set(self.consumed),
                [r.snapshot() for r in self.resources],
                {k: list(v) for k, v in self.grant_uses.items()},
            )
        try:
            yield
        except BaseException:
            with self._lock:
                self.rows.clear()
                self.rows.update(saved[0])
                self.consumed.clear()
                self.consumed.update(saved[1])
                self.grant_uses.clear()
                self.grant_uses.update(saved[3])
                for resource, state in zip(self.resources, saved[2], strict=True):
                    resource.restore(state)
            raise

    def entry(self, key: str) -> LedgerEntry | None:
        row = self.rows.get(key)
        if row is None:
            return None
        return LedgerEntry(key=key, status=row.status, result=copy.deepcopy(row.result))

    def consume(self, decision_id: str) -> bool:
        with self._lock:
            if decision_id in self.consumed:
                return False
            self.consumed.add(decision_id)
            return True

    def grant_live(self, grant_id: str) -> bool:
        with self._lock:
            return grant_id not in self.revoked

    def use_grant(self, grant_id: str, *, binding: CallBinding, max_uses: int) -> bool:
        # Like the desk's conditional UPDATE: not revoked, fewer than max_uses uses so far.
        with self._lock:
            uses = self.grant_uses.setdefault(grant_id, [])
            if grant_id in self.revoked or len(uses) >= max_uses:
                return False
            uses.append(binding.idempotency_key)
            return True

    def is_consumed(self, decision_id: str) -> bool:
        return decision_id in self.consumed

    def record(
        self,
        key: str,
        *,
        binding: CallBinding,
        status: LedgerStatus,
        decision_id: str | None,
        result: Any = None,
    ) -> None:
        with self._lock:
            if key in self.rows:
                raise LedgerConflict(f"the ledger already has a row for {key}")
            self.rows[key] = LedgerRow(
                key=key,
                run_id=binding.run_id,
                tool_call_id=binding.tool_call_id,
                tool=binding.tool,
                status=status,
                decision_id=decision_id,
                result=json_copy(result),
            )

    def confirm(self, key: str, *, result: Any) -> None:
        self._transition(key, LedgerStatus.PENDING, status=LedgerStatus.CONFIRMED, result=json_copy(result))

    def mark_unknown(self, key: str) -> None:
        if not self._transition(key, LedgerStatus.PENDING, status=LedgerStatus.UNKNOWN):
            self._transition(key, LedgerStatus.RETRYING, status=LedgerStatus.UNKNOWN)

    def note_retry(self, key: str, *, binding: CallBinding, decision_id: str | None, error: str) -> int:
        with self._lock:
            row = self.rows.get(key)
            if row is None:
                self.record(key, binding=binding, status=LedgerStatus.RETRYING, decision_id=decision_id)
                row = self.rows[key]
            status = LedgerStatus.RETRYING if row.status == LedgerStatus.PENDING else row.status
            self.rows[key] = replace(row, status=status, retries=row.retries + 1, last_error=error)
            return row.retries + 1

    def resume_retry(self, key: str) -> bool:
        return self._transition(key, LedgerStatus.RETRYING, status=LedgerStatus.PENDING)

    def retries_spent(self, run_id: str) -> int:
        return sum(row.retries for row in self.rows.values() if row.run_id == run_id)

    def check_owned(self) -> None:
        pass  # one owner here: nothing cancels or takes over a run in memory

    def adopt(self, key: str) -> None:
        pass  # rows here belong to no attempt: confirm finds a pending row whoever wrote it

    def reopen(self, key: str) -> None:
        self._transition(key, LedgerStatus.UNKNOWN, status=LedgerStatus.PENDING)

    def reconcile(self, key: str, *, result: Any) -> None:
        """What a reviewer's "it did happen" does on the desk: unknown -> confirmed."""
        self._transition(key, LedgerStatus.UNKNOWN, status=LedgerStatus.CONFIRMED, result=json_copy(result))

    def _transition(self, key: str, from_status: LedgerStatus, **changes: Any) -> bool:
        # Like the database's `filter(status="pending").update(...)`: only a row in `from_status` moves.
        with self._lock:
            row = self.rows.get(key)
            if row is not None and row.status == from_status:
                self.rows[key] = replace(row, **changes)
                return True
            return False
