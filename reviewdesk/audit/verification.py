"""Walking the audit chain: the whole of it, the rows since its newest anchor, and anchoring.

See chain.py for the hash rules, anchors.py for the anchor file and check_record.py for the
last full check's record. Four checks walk the chain: `audit_check`, the whole of it (beat's
`audit.check`, `verify_audit`); `audit_anchor`, the rows since the newest anchor before it
anchors the head (beat's `audit.anchor`); `audit_check_recent`, the same rows, for the audit
page; `audit_check_window`, a window of rows anywhere in it (beat's `audit.sweep`, sweep.py).
What each catches, and what none can, is written in docs/audit.md.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.utils import timezone

from reviewdesk.audit.anchors import (
    Anchor,
    AnchorFileInvalid,
    anchor_append,
    anchors_read,
    chain_head,
    newest_anchor,
)
from reviewdesk.audit.chain import GENESIS, row_hash
from reviewdesk.audit.check_record import CheckRecord, check_record_write
from reviewdesk.audit.keys import AuditKeyMissing, audit_key, plain_boundary, plain_boundary_path
from reviewdesk.audit.models import AuditEvent, ChainVersion

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class AuditReport:
    """What `audit_check` or `audit_anchor` found: `first_bad` names the first bad row (or the
    missing anchored one). `anchors` is None where the anchors were not counted: the anchor
    task reads only the newest."""

    intact: bool
    first_bad: int | None
    problem: str
    rows: int
    anchors: int | None
    last_anchor: Anchor | None

    def describe(self) -> str:
        if not self.intact:
            where = f"row {self.first_bad}" if self.first_bad is not None else "the anchors"
            return f"audit trail BROKEN at {where}: {self.problem}"
        if self.last_anchor is None:
            anchored = "no anchor yet: a truncated tail could not be detected"
        else:
            anchored = f"last anchor: row {self.last_anchor.last_id} at {self.last_anchor.at}"
        counted = "" if self.anchors is None else f", {self.anchors} anchors"
        return f"audit trail intact: {self.rows} rows{counted}; {anchored}"


class _Broken(Exception):
    def __init__(self, row_id: int | None, problem: str) -> None:
        self.row_id = row_id
        self.problem = problem


def _row_problem(
    row: AuditEvent, prev: str, keyed_seen: bool, plain_until: int | None, boundary: int | None
) -> str | None:
    if row.version == ChainVersion.PLAIN:
        # Anyone can compute an unkeyed row: only those written before the upgrade are genuine,
        # and once anchored they are pinned by the anchor's hash.
        if keyed_seen:
            return "an unkeyed row after keyed rows (the chain was rewritten without the key)"
        if plain_until is not None and row.id > plain_until:
            return "an unkeyed row that no anchor covers (the chain was rewritten without the key)"
        if boundary is not None and row.id > boundary:
            return (
                f"an unkeyed row past the last legacy row ({boundary}, recorded in "
                f"{plain_boundary_path().name}): the chain was rewritten without the key"
            )
    if row.prev_hash != prev:
        return "it does not follow the row before it (a row before it was deleted or rewritten)"
    return _hash_problem(row)


def _hash_problem(row: AuditEvent) -> str | None:
    """Why the hash `row` stores is not the one its contents give under its version, or None."""
    try:
        key = audit_key(create=False) if row.version == ChainVersion.KEYED else None
    except AuditKeyMissing as exc:
        return str(exc)
    try:
        expected = row_hash(row, key=key)
    except Exception as exc:  # contents no hash can cover are a bad row, not a crash
        # An edit can put in what the canonical JSON refuses (an integer past 2**53, say):
        # raised, it crashed the page, stopped the anchors and left the last full check's
        # "intact" standing, where it is a row the chain does not vouch for.
        return f"its contents cannot be hashed ({type(exc).__name__}: {exc})"
    if row.hash != expected:
        return "its hash does not match its contents (edited, or recomputed without the key)"
    return None


@dataclass(frozen=True)
class _Walked:
    count: int  # rows up to the last one walked (the start's count included)
    matched: Anchor | None  # the newest anchor matched
    last: tuple[int, str] | None  # (id, hash) of the last row walked, or of the start's row


def _walk(anchors: list[Anchor], start: Anchor | None, upto: int | None = None) -> _Walked:
    """Check the rows after `start` (all when None), up to id `upto`, against the chain and the anchors.

    Unkeyed (PLAIN) rows are accepted only up to the newest anchor (while there is no anchor,
    the first one after the upgrade trusts the old rows it finds), and never past the legacy
    boundary the first keyed write recorded outside the database.
    Raises _Broken at the first bad row.
    """
    plain_until = max((a.last_id for a in anchors), default=start.last_id if start else None)
    boundary = plain_boundary()  # read once per walk: the file beside the audit key
    rows = AuditEvent.objects.order_by("id")
    prev, count, keyed_seen = GENESIS, 0, False
    last: tuple[int, str] | None = None
    if start is not None:
        anchored = AuditEvent.objects.filter(pk=start.last_id).first()
        if anchored is None or anchored.hash != start.hash:
            raise _Broken(start.last_id, f"the row anchored at {start.at} is gone or changed")
        # The anchored hash vouches for the rows before it, but not for this row's own fields
        # while its hash column is left alone: one row's hash, recomputed, covers them.
        problem = _hash_problem(anchored)
        if problem is not None:
            raise _Broken(start.last_id, problem)
        prev, count, keyed_seen = start.hash, start.count, anchored.version == ChainVersion.KEYED
        last = (anchored.id, anchored.hash)
        rows = rows.filter(pk__gt=start.last_id)
    if upto is not None:
        rows = rows.filter(pk__lte=upto)
    pending = sorted(
        (a for a in anchors if start is None or a.last_id > start.last_id), key=lambda a: a.last_id
    )
    matched: Anchor | None = start
    index = 0
    for row in rows.iterator():
        if index < len(pending) and pending[index].last_id < row.id:
            gone = pending[index]
            raise _Broken(gone.last_id, f"row {gone.last_id}, anchored at {gone.at}, was deleted")
        count += 1
        problem = _row_problem(row, prev, keyed_seen, plain_until, boundary)
        if problem is not None:
            raise _Broken(row.id, problem)
        keyed_seen = keyed_seen or row.version == ChainVersion.KEYED
        while index < len(pending) and pending[index].last_id == row.id:
            anchor = pending[index]
            # The anchored hash pins every row up to here (each hash covers the one before),
            # so the anchor's row count needs no separate check.
            if anchor.hash != row.hash:
                raise _Broken(row.id, f"its hash differs from the anchor of {anchor.at}")
            matched, index = anchor, index + 1
        prev, last = row.hash, (row.id, row.hash)
    if index < len(pending):
        gone = pending[index]
        raise _Broken(
            gone.last_id,
            f"the tail was cut: row {gone.last_id}, anchored at {gone.at}, is gone ({count} rows left)",
        )
    return _Walked(count, matched, last)


def audit_check() -> AuditReport:
    """Walk the whole chain: each row's hash under its version, the links, and every anchor."""
    try:
        anchors = anchors_read()
    except AnchorFileInvalid as exc:
        return AuditReport(False, None, str(exc), AuditEvent.objects.count(), 0, None)
    try:
        walked = _walk(anchors, start=None)
    except _Broken as broken:
        return AuditReport(
            False, broken.row_id, broken.problem, AuditEvent.objects.count(), len(anchors), None
        )
    return AuditReport(True, None, "", walked.count, len(anchors), walked.matched)


def audit_verify() -> tuple[bool, int | None]:
    """(intact, id of the first bad row): `audit_check`'s verdict, the whole chain walked."""
    report = audit_check()
    return report.intact, report.first_bad


def audit_check_record(*, create_key: bool = True) -> AuditReport:
    """`audit_check`, its result recorded outside the database, signed, for the audit page
    (check_record.py). Beat's `audit.check` runs it, and `verify_audit --record`, which passes
    `create_key=False`: it refuses to make an anchor key on a host that has none."""
    started = timezone.now()  # the walk sees the rows committed by now: the record says so
    report = audit_check()
    check_record_write(
        create_key=create_key,
        record=CheckRecord(
            at=started,
            intact=report.intact,
            first_bad=report.first_bad,
            problem=report.problem,
            rows=report.rows,
            anchors=report.anchors or 0,  # audit_check counts every line: never None here
            last_anchor=report.last_anchor,
        ),
    )
    if not report.intact:
        logger.error("audit full check: %s", report.describe())
    return report


@dataclass(frozen=True)
class RecentCheck:
    """What `audit_check_recent` found. `since` is the newest anchor, where the walk began
    (None: no anchor yet, and every row was walked); `walked` counts the rows checked after it
    (0 when broken)."""

    intact: bool
    first_bad: int | None
    problem: str
    walked: int
    since: Anchor | None


def audit_check_recent() -> RecentCheck:
    """The audit page's check on each load, its cost bounded by what is new: the newest anchor
    (read from the anchor file's end, its signature verified), its row (still there, with the
    anchored hash, which the row's own fields still give), and each row after it by the walk's
    rule. With no anchor yet, every row, as `audit_check` would.

    Not seen here: a change to a row before the newest anchor (other than the anchored row
    itself), a bad anchor line before the last. The full check sees those; the page shows its
    last record beside this."""
    try:
        since = newest_anchor()
    except AnchorFileInvalid as exc:
        return RecentCheck(False, None, str(exc), 0, None)
    try:
        walked = _walk([], start=since)
    except _Broken as broken:
        return RecentCheck(False, broken.row_id, broken.problem, 0, since)
    return RecentCheck(True, None, "", walked.count - (since.count if since is not None else 0), since)


@dataclass(frozen=True)
class WindowCheck:
    """What `audit_check_window` found: the rows it walked (`first`..`last` by id, None when
    there were none), whether the chain goes on past `last`, and the first bad row."""

    intact: bool
    first_bad: int | None
    problem: str
    first: int | None
    last: int | None
    more: bool


def audit_check_window(after: int, limit: int) -> WindowCheck:
    """The next `limit` rows after id `after` (all rows from the start at 0), each by the full
    walk's rule: its link to the row before it (read from the table, whatever the window), its
    hash, and the unkeyed rows' bounds. The sweep (sweep.py) moves this window round the chain,
    so that an edit or a deletion anywhere shows within one lap. Anchor lines are not read here
    beyond the newest (its row id bounds the unkeyed rows, as in `_walk`): the full check reads
    them all."""
    try:
        latest = newest_anchor()
    except AnchorFileInvalid as exc:
        return WindowCheck(False, None, str(exc), None, None, True)
    before = AuditEvent.objects.filter(pk__lte=after).order_by("-id").only("hash", "version").first()
    prev = before.hash if before is not None else GENESIS
    keyed_seen = before is not None and before.version == ChainVersion.KEYED
    plain_until = latest.last_id if latest is not None else None
    boundary = plain_boundary()
    first = last = None
    for row in AuditEvent.objects.filter(pk__gt=after).order_by("id")[:limit].iterator():
        problem = _row_problem(row, prev, keyed_seen, plain_until, boundary)
        if problem is not None:
            return WindowCheck(False, row.id, problem, first if first is not None else row.id, row.id, True)
        keyed_seen = keyed_seen or row.version == ChainVersion.KEYED
        prev, last = row.hash, row.id
        first = row.id if first is None else first
    more = last is not None and AuditEvent.objects.filter(pk__gt=last).exists()
    return WindowCheck(True, None, "", first, last, more)


def audit_anchor() -> AuditReport:
    """Anchor the chain head, once the rows since the previous anchor check out.

    Only the newest anchor is read (from the anchor file's end) and only the rows after it are
    walked (that anchor vouches for the ones before it), so this stays cheap as the chain and
    the file grow; a bad line further up the file is the full check's to report. A broken
    chain is reported and not anchored: an anchor must never vouch for a rewritten chain. An
    unchanged head is not anchored again. The report counts no anchors (`anchors` is None).
    """
    try:
        newest = newest_anchor()
    except AnchorFileInvalid as exc:
        logger.error("audit anchor refused: %s", exc)
        return AuditReport(False, None, str(exc), 0, None, None)
    head = chain_head()  # read first: rows appended while we walk wait for the next anchor
    if head is None or (newest is not None and newest.last_id == head[0]):
        return AuditReport(True, None, "", newest.count if newest else 0, None, newest)
    last_id, last_hash = head
    try:
        walked = _walk([], start=newest, upto=last_id)
    except _Broken as broken:
        report = AuditReport(False, broken.row_id, broken.problem, 0, None, newest)
        logger.error("audit anchor refused: %s", report.describe())
        return report
    if walked.last != (last_id, last_hash):
        # The walk did not end on the head read above (it was deleted, or put back, meanwhile):
        # an anchor signs only a row the walk reached, and the count the walk reached it with.
        report = AuditReport(
            False, last_id, f"the chain's head (row {last_id}) was not the last row walked", 0, None, newest
        )
        logger.error("audit anchor refused: %s", report.describe())
        return report
    anchor = anchor_append(last_id=last_id, hash=last_hash, count=walked.count)
    return AuditReport(True, None, "", walked.count, None, anchor)
