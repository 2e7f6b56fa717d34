"""How a row's hash is computed, under each chain version.

PLAIN (rows written before the chain was keyed): SHA-256 over the previous
hash and the row's fields. Anyone who can write the table can recompute it.

KEYED: HMAC-SHA256 under the audit key over the canonical JSON of the row id,
the previous hash, the version and the fields (actor id included). The key is
not in the database, so a database writer can neither recompute a row it
edited nor re-link the rows around one it deleted; covering the id means a row
cannot be moved to another position either.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from agents.canonical import canonical_json
from reviewdesk.audit.models import AuditEvent, ChainVersion

GENESIS = "0" * 64


def row_fields(row: AuditEvent) -> dict[str, Any]:
    """The fields both versions hash (the actor's id only counts in KEYED rows)."""
    return {
        "at": row.at.isoformat(),
        "actor": row.actor_name,
        "action": row.action,
        "subject_type": row.subject_type,
        "subject_id": str(row.subject_id),
        "data": row.data,
    }


def plain_hash(prev_hash: str, fields: dict[str, Any]) -> str:
    return hashlib.sha256(prev_hash.encode() + canonical_json(fields)).hexdigest()


def keyed_hash(key: bytes, row: AuditEvent) -> str:
    message = {
        "v": ChainVersion.KEYED.value,
        "id": row.pk,
        "prev": row.prev_hash,
        "actor_id": row.actor_id,
        **row_fields(row),
    }
    return hmac.new(key, canonical_json(message), hashlib.sha256).hexdigest()


def row_hash(row: AuditEvent, *, key: bytes | None) -> str:
    """The hash `row` should carry under its version; KEYED rows need the key."""
    if row.version == ChainVersion.PLAIN:
        return plain_hash(row.prev_hash, row_fields(row))
    if key is None:
        raise ValueError("a keyed row needs the audit key")
    return keyed_hash(key, row)
