"""The sweep: beat's rotating check of the whole chain, a window of rows at a time.

The audit page checks on each load only the rows since the newest anchor, and beat's full
check walks every row once an hour: an edit to an older row went unseen by the page for up to
that hour. Every DESK_AUDIT_SWEEP_SECONDS beat's `audit.sweep` walks the next
DESK_AUDIT_SWEEP_ROWS rows (`audit_check_window`: links, hashes, the unkeyed rows' bounds) from
where the last sweep stopped, back to the first row once it reaches the head, and records what it
found in DESK_AUDIT_SWEEP_FILE, signed with the anchor key as the full check's record is
(check_record.py). So every row is walked at least once a lap: ceil(rows / DESK_AUDIT_SWEEP_ROWS)
sweeps, 10 minutes for up to 200,000 rows at the defaults (docs/audit.md).

The position is kept in that signed record, outside the database: a database writer can neither
forge an "intact" nor move the sweep away from a row it edited. A sweep that finds a bad row
stays on it (the next starts at that row again), so the record says "broken" until the row
verifies again, rather than turning green as the window moves on.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.utils import timezone

from agents.decisions import key_id_for, rfc3339_signed
from reviewdesk.audit.check_record import SignedFileInvalid, signed_file_read, signed_file_replace
from reviewdesk.audit.keys import anchor_private_key
from reviewdesk.audit.verification import WindowCheck, audit_check_window

logger = logging.getLogger(__name__)

SWEEP_KIND = "audit.sweep"
SWEEP_VERSION = 1


@dataclass(frozen=True)
class SweepRecord:
    """What one sweep walked and found, and where the next begins.

    `at` is when it began; `first`..`last` the rows it walked (None: none); `head` the chain's
    last row then. `after`: the next sweep walks the rows after this id (0: a new lap from the
    first row). `lap_began`: when the lap under way began; `lap_done` and `lap_to`: the last
    completed lap, every row up to `lap_to` walked at or after `lap_done` (None: none yet)."""

    at: datetime
    intact: bool
    first_bad: int | None
    problem: str
    first: int | None
    last: int | None
    after: int
    lap_began: datetime
    lap_done: datetime | None
    lap_to: int | None


FIELDS = (
    "kind",
    "v",
    "at",
    "intact",
    "first_bad",
    "problem",
    "first",
    "last",
    "after",
    "lap_began",
    "lap_done",
    "lap_to",
    "key_id",
)


def sweep_path() -> Path:
    return Path(settings.DESK_AUDIT_SWEEP_FILE)


def sweep_read() -> SweepRecord | None:
    """The last sweep's record, its signature verified; None when none was recorded. Raises
    SignedFileInvalid when the file is not such a record or its signature does not verify."""
    payload = signed_file_read(
        sweep_path(), kind=SWEEP_KIND, version=SWEEP_VERSION, fields=FIELDS, what="a sweep"
    )
    if payload is None:
        return None
    try:
        return SweepRecord(
            at=datetime.fromisoformat(payload["at"]),
            intact=bool(payload["intact"]),
            first_bad=payload["first_bad"],
            problem=str(payload["problem"]),
            first=payload["first"],
            last=payload["last"],
            after=int(payload["after"]),
            lap_began=datetime.fromisoformat(payload["lap_began"]),
            lap_done=None if payload["lap_done"] is None else datetime.fromisoformat(payload["lap_done"]),
            lap_to=payload["lap_to"],
        )
    except (TypeError, ValueError):  # signed, so ours: only a format from another version
        raise SignedFileInvalid("not a record of a sweep (its fields do not parse)") from None


def _write(record: SweepRecord) -> bool:
    """Sign and write `record`, unless a sweep that began later has recorded already."""
    key = anchor_private_key()
    payload: dict[str, Any] = {
        "kind": SWEEP_KIND,
        "v": SWEEP_VERSION,
        "at": rfc3339_signed(record.at),
        "intact": record.intact,
        "first_bad": record.first_bad,
        "problem": record.problem,
        "first": record.first,
        "last": record.last,
        "after": record.after,
        "lap_began": rfc3339_signed(record.lap_began),
        "lap_done": None if record.lap_done is None else rfc3339_signed(record.lap_done),
        "lap_to": record.lap_to,
        "key_id": key_id_for(key.public_key()),
    }
    with contextlib.suppress(SignedFileInvalid):
        current = sweep_read()
        if current is not None and current.at > record.at:
            return False
    signed_file_replace(sweep_path(), payload, key)
    return True


def audit_sweep(*, rows: int | None = None) -> SweepRecord:
    """Walk the next window of the chain, record what was found, and return the record.

    Begins after the last record's `after` (at the first row with no valid record), walks
    `rows` rows (DESK_AUDIT_SWEEP_ROWS), and starts a new lap once it has walked the head. A bad
    row is recorded and the position left on it."""
    started = timezone.now()
    try:
        previous = sweep_read()
    except SignedFileInvalid as exc:
        logger.warning("audit sweep: the last record is not valid (%s): starting a new lap", exc)
        previous = None
    after = previous.after if previous is not None else 0
    window = audit_check_window(after, rows or settings.DESK_AUDIT_SWEEP_ROWS)
    record = _next_record(previous, started, after, window)
    _write(record)
    if not record.intact:
        logger.error("audit sweep: chain broken at row %s: %s", record.first_bad, record.problem)
    return record


def _next_record(
    previous: SweepRecord | None, started: datetime, after: int, window: WindowCheck
) -> SweepRecord:
    lap_began = started if after == 0 or previous is None else previous.lap_began
    lap_done = previous.lap_done if previous is not None else None
    lap_to = previous.lap_to if previous is not None else None
    if not window.intact:
        # Stay on the bad row: the next sweep walks from it again (ids are increasing, so the
        # rows after `first_bad - 1` begin with it), and the record stays red while it is bad.
        stay = window.first_bad - 1 if window.first_bad is not None else after
        return SweepRecord(
            started, False, window.first_bad, window.problem, window.first, window.last, stay,
            lap_began, lap_done, lap_to,
        )  # fmt: skip
    if window.more:
        return SweepRecord(
            started, True, None, "", window.first, window.last, window.last or after,
            lap_began, lap_done, lap_to,
        )  # fmt: skip
    # The head walked: every row up to it was walked since this lap began.
    return SweepRecord(
        started, True, None, "", window.first, window.last, 0,
        lap_began, lap_began, window.last if window.last is not None else after,
    )  # fmt: skip
