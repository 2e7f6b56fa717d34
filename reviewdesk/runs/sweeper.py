"""Beat's safety net: re-send what a lost message or a dead worker left behind, expire
overdue approvals. The database is the source of truth; Celery messages are nudges."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from reviewdesk.approvals.lifecycle.expiry import approvals_expire
from reviewdesk.celery import app as celery_app
from reviewdesk.runs.external.unknown import external_effects_unknown
from reviewdesk.runs.models import Run, RunKind, RunStatus
from reviewdesk.runs.transitions import RESUME_TASK

logger = logging.getLogger(__name__)


def runs_sweep() -> dict[str, int]:
    """Beat's safety net: re-send lost messages and expired leases, expire approvals."""
    now = timezone.now()
    stale = now - timedelta(seconds=settings.DESK_REQUEUE_AFTER_SECONDS)
    # Internal runs only: an external run's framework executes it, and holds no lease here.
    internal = Run.objects.filter(kind=RunKind.INTERNAL)
    lost_messages = list(
        internal.filter(status=RunStatus.QUEUED, updated_at__lt=stale)
        .exclude(next_attempt_at__gt=now)
        .values_list("id", flat=True)
    )
    expired_leases = list(
        internal.filter(status=RunStatus.RUNNING, lease_expires_at__lt=now).values_list("id", flat=True)
    )
    requeued = 0
    for run_id in [*lost_messages, *expired_leases]:
        # Touch the row first, so the next sweep waits its turn instead of piling up duplicates.
        Run.objects.filter(pk=run_id).update(updated_at=now)
        try:
            celery_app.send_task(RESUME_TASK, args=[str(run_id)])
            requeued += 1
        except Exception:
            logger.exception("sweeper could not enqueue run %s", run_id)
    return {
        "requeued": requeued,
        "expired": approvals_expire(now=now),
        "unknown": external_effects_unknown(now=now),
    }
