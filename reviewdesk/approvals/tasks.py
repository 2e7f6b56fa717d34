"""Beat's approvals clock: remind, escalate, notify. Idempotent: every change is claimed
by compare-and-set, so a duplicate or concurrent tick does nothing twice."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from reviewdesk.approvals.lifecycle.clock import approvals_escalate, approvals_remind
from reviewdesk.approvals.lifecycle.notify import REMINDER, approvals_notify, notify_send


@shared_task(name="approvals.tick")
def tick() -> dict[str, int]:
    return approvals_tick()


def approvals_tick() -> dict[str, int]:
    now = timezone.now()
    reminded = approvals_remind(now=now)  # committed, item by item, before any email
    escalated = approvals_escalate(now=now)
    for approval_id in reminded:
        notify_send(approval_id=approval_id, occasion=REMINDER)
    return {"reminded": len(reminded), "escalated": escalated, "notified": approvals_notify(now=now)}
