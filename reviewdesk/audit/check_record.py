"""The last full check of the chain, signed, kept outside the database (DESK_AUDIT_CHECK_FILE).

Beat's `audit.check` task walks the whole chain and its anchors every DESK_AUDIT_CHECK_SECONDS
and replaces this file with what it found, signed with the anchor key. The audit page shows it
beside what it checks itself on each load (the rows since the newest anchor), so that no page
load walks the whole trail. A database writer cannot forge "intact" here: the file is outside
the database, and the key that signs it is the anchor key, which beat's worker holds and the
web tier need not (it verifies with the public keys, DESK_AUDIT_ANCHOR_KEYS_FILE).

The signed payload carries `"kind": "audit.check"`, so that neither an anchor line nor a
record can be passed off as the other under the same key.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.conf import settings

from agents.decisions import key_id_for, rfc3339_signed, sign_payload, signature_valid
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


def check_record_path() -> Path:
    return Path(settings.DESK_AUDIT_CHECK_FILE)


def _payload(record: CheckRecord, *, key_id: str) -> dict[str, Any]:
    anchor = record.last_anchor
    return {
        "kind": RECORD_KIND,
        "v": RECORD_VERSION,
        "at": rfc3339_signed(record.at),
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


def check_record_write(record: CheckRecord, *, create_key: bool = True) -> bool:
    """Sign `record` and replace the file with it (`signed_file_replace`).

    A record already there from a check that began later is kept (two checks at once: the
    later one's word stands); returns whether `record` was written. `create_key=False`: refuse
    (AnchorKeyMissing) rather than make an anchor key where there is none."""
    key = anchor_private_key(create=create_key)
    payload = _payload(record, key_id=key_id_for(key.public_key()))
    with contextlib.suppress(CheckRecordInvalid):
        current = check_record_read()
        if current is not None and current.at > record.at:
            return False
    signed_file_replace(check_record_path(), payload, key)
    return True


def signed_file_replace(path: Path, payload: dict[str, Any], key: Ed25519PrivateKey) -> None:
    """Sign `payload` with `key` and replace the file with it, whole or not at all: written to a
    temporary file beside it, flushed to disk, then renamed over it (a reader sees the old
    content or the new, never half of either). The file keeps the mode and owner the one it
    replaces had (an operator's 0640 for a web tier in the worker's group survives every write)."""
    data = json.dumps({**payload, "signature": sign_payload(key, payload)}, sort_keys=True) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # 0600
    try:
        _keep_mode_and_owner(fd, path)
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


def _keep_mode_and_owner(fd: int, path: Path) -> None:
    """Give the new file the permissions of the one it replaces, if any (else mkstemp's 0600)."""
    try:
        current = path.stat()
    except FileNotFoundError:
        return
    os.fchmod(fd, stat.S_IMODE(current.st_mode))
    with contextlib.suppress(PermissionError):  # only root may give a file away
        os.fchown(fd, current.st_uid, current.st_gid)


def check_record_read() -> CheckRecord | None:
    """The last full check's record, its signature verified; None when none was recorded.

    Raises CheckRecordInvalid when the file is malformed, signed by a key that is not among
    the anchor public keys, or its signature does not verify."""
    payload = signed_file_read(
        check_record_path(),
        kind=RECORD_KIND,
        version=RECORD_VERSION,
        fields=PAYLOAD_FIELDS,
        what="a full check",
    )
    return None if payload is None else _record(payload)  # as signed, so as written


class SignedFileInvalid(Exception):
    """A signed record file (`signed_file_read`) is malformed, unreadable or badly signed."""


# The record of the last full check is not one, or its signature does not verify.
CheckRecordInvalid = SignedFileInvalid


def signed_file_read(
    path: Path, *, kind: str, version: int, fields: tuple[str, ...], what: str
) -> dict[str, Any] | None:
    """The signed fields of the record of `what` at `path` (its `kind` and `version`), once the
    signature verifies under one of the anchor public keys; None when there is no file.

    Raises SignedFileInvalid when the file cannot be read, is not such a
    record, is signed by an unknown key, or its signature does not verify."""
    try:
        text = path.read_bytes().decode()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeError) as exc:  # unreadable here: say so on the page, not a 500
        raise SignedFileInvalid(f"cannot be read ({type(exc).__name__}: {exc})") from None
    try:
        entry = json.loads(text)
        payload = {name: entry[name] for name in fields}
        key_id, signature = str(entry["key_id"]), str(entry["signature"])
    except (ValueError, KeyError, TypeError):
        raise SignedFileInvalid(f"not a record of {what}") from None
    if payload["kind"] != kind or payload["v"] != version:
        raise SignedFileInvalid(f"not a record of {what} (kind {payload['kind']!r}, v {payload['v']!r})")
    public_key = anchor_public_keys().get(key_id)
    if public_key is None:
        raise SignedFileInvalid(f"signed by unknown key {key_id}")
    if not signature_valid(public_key, payload, signature):
        raise SignedFileInvalid("bad signature")
    return payload


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
