"""Beat's audit tasks: anchor the chain head outside the database (DESK_AUDIT_ANCHOR_SECONDS),
and check the whole chain, recording the result for the audit page (DESK_AUDIT_CHECK_SECONDS)."""

from __future__ import annotations

from celery import shared_task

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
