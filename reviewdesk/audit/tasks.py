"""Beat's audit tasks: anchor the chain head outside the database (DESK_AUDIT_ANCHOR_SECONDS),
walk the next window of the chain (DESK_AUDIT_SWEEP_SECONDS), and check the whole chain
(DESK_AUDIT_CHECK_SECONDS), the last two recording their result for the audit page."""

from __future__ import annotations

from celery import shared_task

from reviewdesk.audit.sweep import audit_sweep
from reviewdesk.audit.verification import audit_anchor, audit_check_record


@shared_task(name="audit.anchor")
def anchor() -> str:
    # Idempotent: an unchanged head is not anchored twice, and two runs at once
    # append two valid lines for the same head.
    return audit_anchor().describe()


@shared_task(name="audit.check")
def check() -> str:
    # Idempotent: a duplicate walks again and records what it found, unless a check that began
    # later has recorded already (check_record_write keeps the later one's word).
    return audit_check_record().describe()


@shared_task(name="audit.sweep")
def sweep() -> str:
    # Idempotent enough: a duplicate walks the same window again, or the next one; a sweep that
    # began earlier does not replace a later one's record.
    record = audit_sweep()
    walked = "no row" if record.first is None else f"rows {record.first}-{record.last}"
    if not record.intact:
        return f"audit sweep: {walked}: BROKEN at row {record.first_bad}: {record.problem}"
    return f"audit sweep: {walked} intact; next after row {record.after}"
