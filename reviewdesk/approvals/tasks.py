"""Beat's approvals clock: remind, escalate, notify; the reviewers' digests; and a raised
call's second opinion. Idempotent: every change and every mail is claimed by compare-and-set,
so a duplicate or concurrent tick (or reading) does nothing twice."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from reviewdesk.approvals.lifecycle.clock import approvals_escalate, approvals_remind
from reviewdesk.approvals.lifecycle.digest import digests_send
from reviewdesk.approvals.lifecycle.notify import (
    REMINDER,
    approvals_notify,
    approvals_warn_expiring,
    notify_send,
)
from reviewdesk.approvals.lifecycle.reading import READ_TASK, reading_take


@shared_task(name="approvals.tick")
def tick() -> dict[str, int]:
    return approvals_tick()


def approvals_tick() -> dict[str, int]:
    now = timezone.now()
    reminded = approvals_remind(now=now)  # committed, item by item, before any email
    escalated = approvals_escalate(now=now)
    for approval_id in reminded:
        notify_send(approval_id=approval_id, occasion=REMINDER, now=now)
    notified = approvals_notify(now=now)
    return {
        "reminded": len(reminded),
        "escalated": escalated,
        "notified": notified,
        "expiring": approvals_warn_expiring(now=now),
    }


@shared_task(name="approvals.digest")
def digest() -> dict[str, int]:
    """Each reviewer's digest, when theirs is due (DESK_NOTIFY_DIGEST_TICK_SECONDS apart)."""
    return {"digests": digests_send(now=timezone.now())}


@shared_task(name=READ_TASK)
def approval_read(approval_id: str) -> str:
    """A raised call's second opinion (approvals/lifecycle/reading.py), sent when it is raised."""
    return reading_take(approval_id=approval_id)
