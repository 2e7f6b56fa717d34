"""Beat's audit task: anchor the chain head outside the database (DESK_AUDIT_ANCHOR_SECONDS)."""

from __future__ import annotations

from celery import shared_task

from reviewdesk.audit.services import audit_anchor


@shared_task(name="audit.anchor")
def anchor() -> str:
    # Idempotent: an unchanged head is not anchored twice, and two runs at once
    # append two valid lines for the same head.
    return audit_anchor().describe()
