"""The demo agent's world (`agents.demo.DemoWorld`) in memory, recording every effect."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any


@dataclass(frozen=True)
class SentEmail:
    to: str
    subject: str
    body: str
    idempotency_key: str
    message_id: str


@dataclass(frozen=True)
class Refund:
    refund_id: int
    order_id: str
    amount: Decimal
    idempotency_key: str


class RecordingWorld:
    """The demo agent's world that records every effect.

    It deliberately does not deduplicate by idempotency key: a test sees every
    call the tools made. Refunds are DATABASE effects and roll back with the
    ledger's transactions (see `InMemoryLedger(resources=...)`); an email, once
    sent, stays sent.
    """

    def __init__(self) -> None:
        self.emails: list[SentEmail] = []
        self.refunds: list[Refund] = []
        self.holds: list[str] = []  # the orders a refund policy held, in order
        self._next_refund_id = 1

    def send_email(self, *, to: str, subject: str, body: str, idempotency_key: str) -> str:
        message_id = f"<{idempotency_key.replace(':', '.')}@agents.test>"
        self.emails.append(SentEmail(to, subject, body, idempotency_key, message_id))
        return message_id

    def refunded(self, order_id: str) -> Decimal:
        return sum((r.amount for r in self.refunds if r.order_id == order_id), Decimal(0))

    def hold_order(self, order_id: str) -> None:
        self.holds.append(order_id)  # one process, no concurrency: nothing to wait for

    def refund(self, *, order_id: str, amount: Decimal, idempotency_key: str) -> dict[str, Any]:
        refund = Refund(self._next_refund_id, order_id, Decimal(amount), idempotency_key)
        self._next_refund_id += 1
        self.refunds.append(refund)
        return {"refund_id": refund.refund_id, "order_id": order_id, "amount": str(refund.amount)}

    def snapshot(self) -> tuple[list[Refund], int]:
        return list(self.refunds), self._next_refund_id

    def restore(self, snapshot: tuple[list[Refund], int]) -> None:
        refunds, next_id = snapshot
        self.refunds, self._next_refund_id = list(refunds), next_id
