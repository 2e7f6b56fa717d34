"""The last full check of the chain, signed, kept outside the database (DESK_AUDIT_CHECK_FILE).

Beat's `audit.check` task walks the whole chain and its anchors every DESK_AUDIT_CHECK_SECONDS
and replaces this file with what it found, signed with the anchor key. The audit page shows it
beside what it checks itself on each load (the rows since the newest anchor), so that no page
load walks the whole trail. A database writer cannot forge "intact" here: the file is outside
the database, and the key that signs it is the anchor key, which the web tier does not hold
(it verifies with the public keys, DESK_AUDIT_ANCHOR_KEYS_FILE).

The signed payload carries `"kind": "audit.check"`, so that neither an anchor line nor a
record can be passed off as the other under the same key.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from django.conf import settings

from agents.decisions import key_id_for, rfc3339, sign_payload, signature_valid
from reviewdesk.audit.anchors import Anchor
from reviewdesk.audit.keys import anchor_private_key, anchor_public_keys

RECORD_KIND = "audit.check"
RECORD_VERSION = 1


@dataclass(frozen=True)
class CheckRecord:
    """What one full check found. `at` is when it began: it saw the rows committed by then."""

    at: datetime
    intact: bool
    first_bad: int | None
    problem: str
    rows: int
    anchors: int
    last_anchor: Anchor | None  # the newest anchor the walk matched (None when broken, or none yet)


class CheckRecordInvalid(Exception):
    """The record file is not a check record, or its signature does not verify."""


def check_record_path() -> Path:
    return Path(settings.DESK_AUDIT_CHECK_FILE)


def _payload(record: CheckRecord, *, key_id: str) -> dict[str, Any]:
    anchor = record.last_anchor
    return {
        "kind": RECORD_KIND,
        "v": RECORD_VERSION,
        "at": rfc3339(record.at),
        "intact": record.intact,
        "first_bad": record.first_bad,
        "problem": record.problem,
        "rows": record.rows,
        "anchors": record.anchors,
        "last_anchor": None
        if anchor is None
        else {"last_id": anchor.last_id, "hash": anchor.hash, "count": anchor.count, "at": anchor.at},
        "key_id": key_id,
    }


# The fields the signature covers: read back, exactly these are verified.
PAYLOAD_FIELDS = (
    "kind",
    "v",
    "at",
    "intact",
    "first_bad",
    "problem",
    "rows",
    "anchors",
    "last_anchor",
    "key_id",
)


def check_record_write(record: CheckRecord) -> None:
    """Sign `record` and replace the file with it, whole or not at all: written to a temporary
    file beside it, flushed to disk, then renamed over it (a reader sees the old record or the
    new one, never half of either)."""
    key = anchor_private_key()
    payload = _payload(record, key_id=key_id_for(key.public_key()))
    data = json.dumps({**payload, "signature": sign_payload(key, payload)}, sort_keys=True) + "\n"
    path = check_record_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # 0600
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # the rename itself survives a crash
    finally:
        os.close(directory)


def check_record_read() -> CheckRecord | None:
    """The last full check's record, its signature verified; None when none was recorded.

    Raises CheckRecordInvalid when the file is malformed, signed by a key that is not among
    the anchor public keys, or its signature does not verify."""
    try:
        text = check_record_path().read_text()
    except FileNotFoundError:
        return None
    try:
        entry = json.loads(text)
        payload = {name: entry[name] for name in PAYLOAD_FIELDS}
        key_id, signature = str(entry["key_id"]), str(entry["signature"])
    except (ValueError, KeyError, TypeError):
        raise CheckRecordInvalid("not a record of a full check") from None
    public_key = anchor_public_keys().get(key_id)
    if public_key is None:
        raise CheckRecordInvalid(f"signed by unknown key {key_id}")
    if not signature_valid(public_key, payload, signature):
        raise CheckRecordInvalid("bad signature")
    return _record(payload)  # as signed, so as check_record_write wrote it


def _record(payload: dict[str, Any]) -> CheckRecord:
    anchor = payload["last_anchor"]
    return CheckRecord(
        at=datetime.fromisoformat(payload["at"]),
        intact=payload["intact"],
        first_bad=payload["first_bad"],
        problem=payload["problem"],
        rows=payload["rows"],
        anchors=payload["anchors"],
        last_anchor=None
        if anchor is None
        else Anchor(anchor["last_id"], anchor["hash"], anchor["count"], anchor["at"]),
    )
