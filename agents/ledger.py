"""The side-effect ledger's contract, as the gate sees it: statuses, the binding of a call,
a row, and the keyring and ledger interfaces a host implements (DESIGN.md, "Side-effect
ledger"). The desk implements them on the database; agents/testing in memory."""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey


class LedgerStatus(StrEnum):
    """A ledger row's status (DESIGN.md, "Side-effect ledger")."""

    PENDING = "pending"  # written before an external effect runs
    CONFIRMED = "confirmed"  # the effect ran; the row holds its result
    UNKNOWN = "unknown"  # a pending row found after a crash: a human must say what happened
    # The last try failed transiently and certainly did not take effect: it may run again.
    RETRYING = "retrying"


@dataclass(frozen=True)
class CallBinding:
    run_id: str
    checkpoint_id: str | None
    tool_call_id: str
    tool: str

    @property
    def idempotency_key(self) -> str:
        return f"{self.run_id}:{self.tool_call_id}"


@dataclass(frozen=True)
class LedgerEntry:
    key: str
    status: LedgerStatus
    result: Any


class Keyring(Protocol):
    def public_key(self, key_id: str) -> Ed25519PublicKey | None: ...


class Ledger(Protocol):
    def atomic(self) -> AbstractContextManager[Any]:
        """A transaction of the ledger's writes, fenced: it refuses to start for an attempt that
        no longer owns the run."""
        ...

    def check_owned(self) -> None:
        """The fence's check without a write: raises, as `atomic` would, when this attempt no
        longer owns the run. Asked before a call that writes nothing (a read-only tool's), so
        that nothing runs for a run cancelled or taken over (a resumed attempt's first call)."""
        ...

    def entry(self, key: str) -> LedgerEntry | None: ...

    def consume(self, decision_id: str) -> bool:
        """Mark the decision consumed; False when it already was (compare-and-set)."""
        ...

    def record(
        self,
        key: str,
        *,
        binding: CallBinding,
        status: LedgerStatus,
        decision_id: str | None,
        result: Any = None,
    ) -> None: ...

    def confirm(self, key: str, *, result: Any) -> None: ...

    def mark_unknown(self, key: str) -> None:
        """pending (or retrying) -> unknown: a human must say whether the effect happened."""
        ...

    def note_retry(self, key: str, *, binding: CallBinding, decision_id: str | None, error: str) -> int:
        """A try certainly did not take effect: the row (created if missing, else from
        pending) becomes `retrying`, its retry count grows by one and it keeps `error`.
        Returns the call's retry count: what its budget counts (on the desk, the failures
        since the run was last retried by hand)."""
        ...

    def resume_retry(self, key: str) -> bool:
        """retrying -> pending, as this attempt's, before trying again; False if the row
        was not `retrying` (compare-and-set)."""
        ...

    def retries_spent(self, run_id: str) -> int:
        """Failed tries recorded on all of the run's ledger rows (the per-run budget), counted
        as `note_retry` counts them."""
        ...

    def use_grant(self, grant_id: str, *, binding: CallBinding, max_uses: int) -> bool:
        """Count one use of the grant for this call, with the ledger row: False when the grant
        is revoked (by its row or by a signed revocation, whatever the row says), expired or
        has `max_uses` uses already, and when the use cannot be recorded (race-safe: two uses
        never both take a last one). False, never an error: the gate asks a human instead."""
        ...

    def grant_live(self, grant_id: str) -> bool:
        """Whether the grant is neither revoked (as for `use_grant`) nor expired now, its uses
        aside: asked before an external call it allowed is tried again, whose use its first try
        counted."""
        ...

    def adopt(self, key: str) -> None:
        """A `pending` row an earlier attempt left, made this attempt's: an idempotent external
        effect tried again under its key, whose `confirm` must then find it."""
        ...

    def reopen(self, key: str) -> None:
        """unknown -> pending, for a re-run a reviewer authorised."""
        ...
