"""Signed grant revocations, pinned outside the database.

Revoking a grant signs a revocation with the desk's key (`agents.grants.revocation_payload`),
stores it on the grant's row and appends it to DESK_GRANT_REVOCATIONS_FILE, in the revoke's
transaction: the web tier writes the file, workers only read it. Before a grant is used (and
before a call it allowed is tried again) the gate's ledger reads the row's `revoked_at` and
asks `grant_signed_revoked`: the row's signed revocation, and the pinned ones. A database
writer can clear the row's columns; the file is beyond its reach, as the device-key
revocations `trust pin` writes are (docs/device-keys.md). A record that does not verify under
the keyring revokes nothing.

The file is append-only JSON lines, each `{"payload": {...}, "signature": "..."}`, each written
after a newline of its own so a line cut short by a crash cannot swallow the next one.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from django.conf import settings

from agents.grants import SignedRevocation, revocation_payload, revokes
from reviewdesk.approvals import signing

if TYPE_CHECKING:
    from datetime import datetime

    from django.contrib.auth.models import User

    from reviewdesk.approvals.models import Grant

logger = logging.getLogger(__name__)

PinnedIndex = dict[str, list[SignedRevocation]]

# The file as last read in this process, by (inode, size, mtime): revocations are rare and
# every grant use asks, so the file is parsed again only when it changed.
_read_lock = threading.Lock()
_last_read: dict[Path, tuple[tuple[int, int, int], PinnedIndex]] = {}


class PinnedUnreadable(OSError):
    """The pinned revocations exist and cannot be read: no grant may be trusted meanwhile."""


def revocation_sign(*, grant: Grant, user: User, at: datetime) -> SignedRevocation:
    """The signed revocation of `grant` by `user` at `at` (the web tier holds the key)."""
    payload = revocation_payload(
        grant_id=str(grant.pk), revoked_by=user.get_username(), revoked_at=at, key_id=signing.current_key_id()
    )
    return SignedRevocation(payload=payload, signature=signing.sign(payload))


def revocation_pin(revocation: SignedRevocation, path: Path | None = None) -> None:
    """Append the revocation to the pinned file and flush it to disk. Raises OSError when it
    cannot: the caller's transaction then rolls back, and the grant stays unrevoked."""
    path = Path(path or settings.DESK_GRANT_REVOCATIONS_FILE)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(
        {"payload": revocation.payload, "signature": revocation.signature},
        sort_keys=True,
        separators=(",", ":"),
    )
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, ("\n" + line + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def _parse(text: bytes) -> PinnedIndex:
    found: PinnedIndex = {}
    for raw in text.splitlines():
        try:
            entry = json.loads(raw)
            revocation = SignedRevocation(payload=entry["payload"], signature=str(entry["signature"]))
            grant_id = str(revocation.payload["grant_id"])
        except (ValueError, KeyError, TypeError):
            continue  # a blank separator, or a line a crash cut short
        found.setdefault(grant_id, []).append(revocation)
    return found


def pinned_revocations(grant_id: str, path: Path | None = None) -> list[SignedRevocation]:
    """The pinned revocations naming `grant_id` (unverified). None while no grant was ever
    revoked (no file); PinnedUnreadable when the file is there and cannot be read."""
    path = Path(path or settings.DESK_GRANT_REVOCATIONS_FILE)
    try:
        stat = path.stat()
        version = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        with _read_lock:
            cached = _last_read.get(path)
            if cached is None or cached[0] != version:
                cached = (version, _parse(path.read_bytes()))
                _last_read[path] = cached
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise PinnedUnreadable(f"the pinned grant revocations {path} cannot be read: {exc}") from exc
    return list(cached[1].get(str(grant_id), ()))


def grant_signed_revoked(grant: Grant) -> bool:
    """Whether a signed revocation, stored on the grant's row or pinned in the file, revokes the
    grant, whatever the row's `revoked_at` says (the caller's query reads that). A pinned file
    that cannot be read counts as a revocation: the gate then asks a human rather than trust a
    grant whose revocation it cannot see."""
    keyring = signing.FileKeyring()
    stored = (
        [SignedRevocation(payload=grant.revocation, signature=grant.revocation_signature)]
        if grant.revocation is not None
        else []
    )
    try:
        pinned = pinned_revocations(str(grant.pk))
    except PinnedUnreadable as exc:
        logger.warning("grant %s refused: %s", grant.pk, exc)
        return True
    return any(revokes(r, str(grant.pk), keyring=keyring) for r in (*stored, *pinned))
