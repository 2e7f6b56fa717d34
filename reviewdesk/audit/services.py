"""The audit trail's writes: append-only rows in a keyed hash chain (`audit_record`).

See chain.py for the hash rules; verification.py walks the chain and anchors its head outside
the database. What this catches, and what it cannot, is written in docs/audit.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.utils import timezone

from reviewdesk.audit.chain import row_hash
from reviewdesk.audit.keys import audit_key, record_plain_boundary
from reviewdesk.audit.models import AuditEvent, ChainVersion
from reviewdesk.audit.rows import audit_chain_tail, audit_row_insert
from reviewdesk.lib.db import append_later, serialize_writers

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def audit_record(
    *, actor: User | None, action: str, subject_type: str, subject_id: Any, data: dict[str, Any] | None = None
) -> AuditEvent | None:
    """Append to the chain inside the caller's transaction (or a new one); in an
    `atomic_appends_last` block, at the block's end (the row is returned only when written now)."""
    key = audit_key()  # a missing key refuses the action at once, deferred or not
    data = dict(data or {})  # as it is now, whatever the caller does with its dict meanwhile

    def write() -> AuditEvent:
        return _append(
            key, actor=actor, action=action, subject_type=subject_type, subject_id=subject_id, data=data
        )

    if append_later(write):
        return None
    # No savepoint: a failed audit write must undo the caller's action anyway (two round trips
    # saved per row).
    with transaction.atomic(savepoint=False):
        return write()


def _append(
    key: bytes,
    *,
    actor: User | None,
    action: str,
    subject_type: str,
    subject_id: Any,
    data: dict[str, Any],
) -> AuditEvent:
    serialize_writers()
    record_plain_boundary(_last_plain_id)
    # The keyed hash covers the row id: take the id with the head's hash, under the lock,
    # and insert the row whole (one statement less than inserting, then hashing).
    prev, pk = audit_chain_tail()
    row = AuditEvent(
        id=pk,
        at=timezone.now(),
        actor=actor,
        actor_name=actor.get_username() if actor is not None else "system",
        action=action,
        subject_type=subject_type,
        subject_id=str(subject_id),
        data=data,
        prev_hash=prev,
        version=ChainVersion.KEYED,
    )
    row.hash = row_hash(row, key=key)
    audit_row_insert(row)
    return row


def _last_plain_id() -> int:
    last = AuditEvent.objects.filter(version=ChainVersion.PLAIN).order_by("-id").values_list("id", flat=True)
    return last.first() or 0
