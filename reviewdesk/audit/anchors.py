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
from typing import Any, BinaryIO

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from django.conf import settings

from agents.decisions import key_id_for, rfc3339_signed, sign_payload, signature_valid
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

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"anchor file {where}: {reason}")


def _payload(*, last_id: int, hash: str, count: int, at: str, key_id: str) -> dict[str, Any]:
    return {"v": ANCHOR_VERSION, "last_id": last_id, "hash": hash, "count": count, "at": at, "key_id": key_id}


def anchors_read() -> list[Anchor]:
    """Every anchor in the file, in file order; raises AnchorFileInvalid at the first bad line.

    Each line's signature is verified: the cost grows with the file (a line a minute), so only
    the full check (`audit_check`) reads it all; the page and the anchor task take `newest_anchor`.
    """
    path = Path(settings.DESK_AUDIT_ANCHOR_FILE)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    keys = anchor_public_keys()
    return [
        _anchor_from_line(raw.decode(errors="replace"), keys, where=f"line {number}")
        for number, raw in enumerate(_written_lines(data), start=1)
        if raw.strip()
    ]


def _written_lines(data: bytes) -> list[bytes]:
    """The file's lines that are whole: text after the last newline is a line being appended
    (one write, which a reader may catch half done), not yet an anchor. `anchor_append` starts
    its line with a newline when a crash left a line without one, so that one is then whole,
    and read as the bad line it is."""
    return data[: data.rfind(b"\n") + 1].splitlines()


# An anchor line is about 250 bytes: a longer last line is not an anchor.
TAIL_BYTES = 4096
# How far back the newest anchor is looked for, past blank lines and a line being appended.
READ_BACK_LIMIT = 16 * TAIL_BYTES


def newest_anchor() -> Anchor | None:
    """The file's last whole anchor line, its signature verified, read from the file's end (a
    line still being appended is not one yet; blank lines are skipped, as `anchors_read` skips
    them); None while the file holds none. Raises AnchorFileInvalid when that line is bad. The
    lines before it are not read: the full check (`anchors_read`) reports those."""
    path = Path(settings.DESK_AUDIT_ANCHOR_FILE)
    try:
        with path.open("rb") as handle:
            end = handle.seek(0, os.SEEK_END)
            line = _last_line(handle, end)
    except FileNotFoundError:
        return None
    if line is None:
        return None
    return _anchor_from_line(line.decode(errors="replace"), anchor_public_keys(), where="last line")


def _last_line(handle: BinaryIO, end: int) -> bytes | None:
    """The last whole, non-blank line before `end`, read backwards a block at a time; None when
    the file has none. AnchorFileInvalid when that line is longer than TAIL_BYTES, or when
    READ_BACK_LIMIT bytes hold no whole line (nothing an anchor task writes looks like that)."""
    buffer, position = b"", end
    while position > 0 and len(buffer) < READ_BACK_LIMIT:
        step = min(TAIL_BYTES, position)
        position -= step
        handle.seek(position)
        buffer = handle.read(step) + buffer
        whole = buffer[: buffer.rfind(b"\n") + 1].rstrip()  # no unfinished line, no blank ones
        begins = whole.rfind(b"\n") + 1
        started = bool(whole) and (begins > 0 or position == 0)  # the line's start is in the buffer
        if len(whole) - begins > TAIL_BYTES:  # longer than an anchor (and may go on further back)
            raise AnchorFileInvalid("last line", f"not an anchor (longer than {TAIL_BYTES} bytes)")
        if started:
            return whole[begins:]
    if position > 0:
        raise AnchorFileInvalid("last line", f"no whole line in the file's last {READ_BACK_LIMIT} bytes")
    return None


def _anchor_from_line(raw: str, keys: dict[str, Ed25519PublicKey], *, where: str) -> Anchor:
    """The anchor one line of the file holds, once its signature verifies under `keys`."""
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
    except (ValueError, KeyError, TypeError, OverflowError):
        raise AnchorFileInvalid(where, "not an anchor") from None
    public_key = keys.get(payload["key_id"])
    if public_key is None:
        raise AnchorFileInvalid(where, f"signed by unknown key {payload['key_id']}")
    if not signature_valid(public_key, payload, signature):
        raise AnchorFileInvalid(where, "bad signature")
    return Anchor(payload["last_id"], payload["hash"], payload["count"], payload["at"])


def anchor_append(*, last_id: int, hash: str, count: int) -> Anchor:
    """Sign the head and append it as one line (one write on an O_APPEND file: lines never interleave)."""
    key = anchor_private_key()
    payload = _payload(
        last_id=last_id,
        hash=hash,
        count=count,
        at=rfc3339_signed(datetime.now(UTC)),
        key_id=key_id_for(key.public_key()),
    )
    line = json.dumps({**payload, "signature": sign_payload(key, payload)}, sort_keys=True) + "\n"
    path = Path(settings.DESK_AUDIT_ANCHOR_FILE)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        if _ends_unfinished(fd):
            # A crash cut the last append short: close that line, so this one is whole and
            # the cut one is read as the bad line it is (`_written_lines`).
            line = "\n" + line
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return Anchor(last_id, hash, count, payload["at"])


def _ends_unfinished(fd: int) -> bool:
    size = os.fstat(fd).st_size
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


def chain_head() -> tuple[int, str] | None:
    """(last id, its hash), or None for an empty chain.

    Rows commit in id order (audit_record holds the chain lock until commit), so no row
    up to a visible id appears after it is read: the anchor task counts them as it walks.
    """
    return AuditEvent.objects.order_by("-id").values_list("id", "hash").first()
