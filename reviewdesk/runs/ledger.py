"""The side-effect ledger of one attempt, on SideEffect rows (agents.ledger.Ledger).

Every write that starts or re-starts an effect is fenced by the attempt's host (the run row
locked, the lease and cancel epochs checked); recording that an effect happened is not, since
that stays true whoever owns the run now.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.db.models import F, Sum
from django.utils import timezone

from agents.gate import CallBinding, LedgerEntry, LedgerStatus
from reviewdesk.approvals.deciding.record import decision_consume
from reviewdesk.approvals.grants.use import grant_is_live, grant_use
from reviewdesk.lib import faults
from reviewdesk.runs.models import EffectStatus, SideEffect
from reviewdesk.runs.rows import side_effect_insert, side_effect_status

if TYPE_CHECKING:
    from reviewdesk.runs.host import DatabaseHost


class DatabaseLedger:
    """The side-effect ledger on SideEffect rows; every write is fenced by the host."""

    def __init__(self, *, host: DatabaseHost) -> None:
        self.host = host

    @contextmanager
    def atomic(self) -> Iterator[None]:
        with transaction.atomic():
            self.host.fence()
            yield

    def check_owned(self) -> None:
        # One read, no lock: the call it precedes writes nothing to keep out of a cancel's way.
        self.host.check_owned()

    def entry(self, key: str) -> LedgerEntry | None:
        found = side_effect_status(key)
        if found is None:
            return None
        status, result = found
        return LedgerEntry(key=key, status=LedgerStatus(status), result=result)

    def consume(self, decision_id: str) -> bool:
        return decision_consume(decision_id=decision_id)

    def record(
        self, key: str, *, binding: CallBinding, status: str, decision_id: str | None, result: Any = None
    ) -> None:
        side_effect_insert(
            SideEffect(
                run_id=binding.run_id,
                idempotency_key=key,
                tool_call_id=binding.tool_call_id,
                tool=binding.tool,
                status=status,
                decision_id=decision_id,
                result=result,
                attempt=self.host.attempt,
            )
        )
        # Crash points for the fault-injection tests (inert otherwise): just after this commits.
        after = "after_ledger_pending" if status == EffectStatus.PENDING else "after_ledger_confirmed"
        transaction.on_commit(lambda: faults.point(after))

    def confirm(self, key: str, *, result: Any) -> None:
        faults.point("after_effect")
        # Not fenced: the effect has happened, and recording that is true whoever owns the run now.
        # Only this attempt's pending row: if the lease was lost and a reviewer has since
        # authorised a re-run, that row belongs to the re-run's attempt. One UPDATE, committed
        # on its own (autocommit) unless a caller's transaction holds it (READ/DATABASE effects).
        SideEffect.objects.filter(
            idempotency_key=key, status=EffectStatus.PENDING, attempt=self.host.attempt
        ).update(status=EffectStatus.CONFIRMED, result=result, updated_at=timezone.now())
        faults.point("after_ledger_confirmed")

    def use_grant(self, grant_id: str, *, binding: CallBinding, max_uses: int) -> bool:
        # Inside the caller's fenced transaction, with the ledger row it authorises.
        return grant_use(grant_id=grant_id, binding=binding, max_uses=max_uses, attempt=self.host.attempt)

    def grant_live(self, grant_id: str) -> bool:
        return grant_is_live(grant_id)

    def adopt(self, key: str) -> None:
        # Fenced: only the attempt that owns the run may try the effect again.
        with self.atomic():
            SideEffect.objects.filter(idempotency_key=key, status=EffectStatus.PENDING).update(
                attempt=self.host.attempt, updated_at=timezone.now()
            )

    def reopen(self, key: str) -> None:
        # Fenced: only the attempt that owns the run may start the effect again.
        with self.atomic():
            SideEffect.objects.filter(idempotency_key=key, status=EffectStatus.UNKNOWN).update(
                status=EffectStatus.PENDING, attempt=self.host.attempt, updated_at=timezone.now()
            )

    def mark_unknown(self, key: str) -> None:
        with self.atomic():
            SideEffect.objects.filter(
                idempotency_key=key, status__in=[EffectStatus.PENDING, EffectStatus.RETRYING]
            ).update(status=EffectStatus.UNKNOWN, updated_at=timezone.now())

    def note_retry(self, key: str, *, binding: CallBinding, decision_id: str | None, error: str) -> int:
        # Fenced: a worker that lost its lease leaves its `pending` row for a human to reconcile.
        with self.atomic():
            row, _ = SideEffect.objects.select_for_update().get_or_create(
                idempotency_key=key,
                defaults={
                    "run_id": binding.run_id,
                    "tool_call_id": binding.tool_call_id,
                    "tool": binding.tool,
                    "status": EffectStatus.RETRYING,
                    "decision_id": decision_id,
                    "attempt": self.host.attempt,
                },
            )
            if row.status == EffectStatus.PENDING:
                row.status = EffectStatus.RETRYING
            row.retries += 1
            row.last_error = error[:2000]
            row.save(update_fields=["status", "retries", "last_error", "updated_at"])
        return row.retries - row.retries_at_retry  # the budget counts from the last retry by hand

    def resume_retry(self, key: str) -> bool:
        # Inside the caller's fenced transaction. Compare-and-set: one try at a time.
        updated = SideEffect.objects.filter(idempotency_key=key, status=EffectStatus.RETRYING).update(
            status=EffectStatus.PENDING, attempt=self.host.attempt, updated_at=timezone.now()
        )
        if updated:
            transaction.on_commit(lambda: faults.point("after_ledger_pending"))
        return updated == 1

    def retries_spent(self, run_id: str) -> int:
        # Since the run was last retried by hand (SideEffect.retries_at_retry), as note_retry counts.
        spent = SideEffect.objects.filter(run_id=run_id).aggregate(
            total=Sum(F("retries") - F("retries_at_retry"))
        )
        return spent["total"] or 0
