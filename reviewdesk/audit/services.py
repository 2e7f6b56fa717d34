"""The audit trail: append-only rows in a SHA-256 hash chain."""

from __future__ import annotations

import hashlib
from typing import Any

from django.db import transaction
from django.utils import timezone

from agents.canonical import canonical_json
from reviewdesk.audit.models import AuditEvent
from reviewdesk.db import serialize_writers

GENESIS = "0" * 64


def _row_hash(prev_hash: str, fields: dict[str, Any]) -> str:
    return hashlib.sha256(prev_hash.encode() + canonical_json(fields)).hexdigest()


def _fields(*, at, actor_name, action, subject_type, subject_id, data) -> dict[str, Any]:
    return {
        "at": at.isoformat(),
        "actor": actor_name,
        "action": action,
        "subject_type": subject_type,
        "subject_id": str(subject_id),
        "data": data,
    }


def audit_record(
    *, actor, action: str, subject_type: str, subject_id, data: dict | None = None
) -> AuditEvent:
    """Append to the chain inside the caller's transaction (or a new one)."""
    with transaction.atomic():
        serialize_writers("audit-chain")
        prev = AuditEvent.objects.order_by("-id").values_list("hash", flat=True).first() or GENESIS
        at = timezone.now()
        actor_name = actor.get_username() if actor is not None else "system"
        data = data or {}
        fields = _fields(
            at=at,
            actor_name=actor_name,
            action=action,
            subject_type=subject_type,
            subject_id=subject_id,
            data=data,
        )
        return AuditEvent.objects.create(
            at=at,
            actor=actor,
            actor_name=actor_name,
            action=action,
            subject_type=subject_type,
            subject_id=str(subject_id),
            data=data,
            prev_hash=prev,
            hash=_row_hash(prev, fields),
        )


def audit_verify() -> tuple[bool, int | None]:
    """Walk the chain; return (intact, id of the first bad row)."""
    prev = GENESIS
    for row in AuditEvent.objects.order_by("id").iterator():
        fields = _fields(
            at=row.at,
            actor_name=row.actor_name,
            action=row.action,
            subject_type=row.subject_type,
            subject_id=row.subject_id,
            data=row.data,
        )
        if row.prev_hash != prev or row.hash != _row_hash(prev, fields):
            return False, row.id
        prev = row.hash
    return True, None
