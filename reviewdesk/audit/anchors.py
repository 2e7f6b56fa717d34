"""Anchors: the chain's head, signed, appended to a file outside the database.

Each line of DESK_AUDIT_ANCHOR_FILE is one JSON object: the last row's id, its
hash, how many rows there were up to it, when, and the Ed25519 signature of the
anchor key over those fields. A database writer cannot touch the file, so once
a head is anchored, cutting the rows up to it (or replacing them) is caught by
`audit_check`. Rows written after the newest anchor are not covered yet: the
window is DESK_AUDIT_ANCHOR_SECONDS.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.conf import settings

from agents.decisions import key_id_for, rfc3339, sign_payload, signature_valid
from reviewdesk.audit.keys import anchor_private_key, anchor_public_keys
from reviewdesk.audit.models import AuditEvent

logger = logging.getLogger(__name__)

ANCHOR_VERSION = 1


@dataclass(frozen=True)
class Anchor:
    last_id: int
    hash: str
    count: int
    at: str


class AnchorFileInvalid(Exception):
    """A line of the anchor file is malformed, unsigned, or signed by an unknown key."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"anchor file line {line}: {reason}")
        self.line = line


def _payload(*, last_id: int, hash: str, count: int, at: str, key_id: str) -> dict[str, Any]:
    return {"v": ANCHOR_VERSION, "last_id": last_id, "hash": hash, "count": count, "at": at, "key_id": key_id}


def anchors_read() -> list[Anchor]:
    """Every anchor in the file, in file order; raises AnchorFileInvalid at the first bad line."""
    path = Path(settings.DESK_AUDIT_ANCHOR_FILE)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    keys = anchor_public_keys()
    anchors = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            entry = json.loads(raw)
            payload = _payload(
                last_id=int(entry["last_id"]),
                hash=str(entry["hash"]),
                count=int(entry["count"]),
                at=str(entry["at"]),
                key_id=str(entry["key_id"]),
            )
            signature = str(entry["signature"])
        except (ValueError, KeyError, TypeError):
            raise AnchorFileInvalid(number, "not an anchor") from None
        public_key = keys.get(payload["key_id"])
        if public_key is None:
            raise AnchorFileInvalid(number, f"signed by unknown key {payload['key_id']}")
        if not signature_valid(public_key, payload, signature):
            raise AnchorFileInvalid(number, "bad signature")
        anchors.append(Anchor(payload["last_id"], payload["hash"], payload["count"], payload["at"]))
    return anchors


def anchor_append(*, last_id: int, hash: str, count: int) -> Anchor:
    """Sign the head and append it as one line (one write on an O_APPEND file: lines never interleave)."""
    key = anchor_private_key()
    payload = _payload(
        last_id=last_id,
        hash=hash,
        count=count,
        at=rfc3339(datetime.now(UTC)),
        key_id=key_id_for(key.public_key()),
    )
    line = json.dumps({**payload, "signature": sign_payload(key, payload)}, sort_keys=True) + "\n"
    path = Path(settings.DESK_AUDIT_ANCHOR_FILE)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return Anchor(last_id, hash, count, payload["at"])


def chain_head() -> tuple[int, str, int] | None:
    """(last id, its hash, rows up to it), or None for an empty chain.

    Rows commit in id order (audit_record holds the chain lock until commit), so
    the count of rows up to a visible id does not change after it is read.
    """
    head = AuditEvent.objects.order_by("-id").values_list("id", "hash").first()
    if head is None:
        return None
    last_id, last_hash = head
    return last_id, last_hash, AuditEvent.objects.filter(id__lte=last_id).count()
