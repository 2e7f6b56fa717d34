"""The audit page's line on the hash chain: what was checked on this load, and what the last
full check found, each with its time.

The page checks only what is new (`audit_check_recent`: the newest anchor and the rows after
it), so it calls the whole chain intact only on the word of a full check: beat's signed record
(`check_record_read`), or its own walk when there is no anchor yet and it walked every row.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.utils import timezone

from reviewdesk.audit.check_record import CheckRecord, CheckRecordInvalid, check_record_read
from reviewdesk.audit.verification import RecentCheck, audit_check_recent

# The flash classes (static/desk/desk.css) the line takes.
INTACT, UNCHECKED, BROKEN = "success", "warning", "error"

# What an admin can do while no valid record of a full check is at hand.
RUN_THE_FULL_CHECK = (
    "run manage.py verify_audit --record where beat's worker runs, or wait for beat's audit.check"
)


@dataclass(frozen=True)
class ChainStatus:
    kind: str  # INTACT, UNCHECKED or BROKEN
    text: str


def chain_status() -> ChainStatus:
    """Check the rows since the newest anchor now, read the last full check's record, and say both."""
    recent = audit_check_recent()
    try:
        record, record_problem = check_record_read(), ""
    except CheckRecordInvalid as exc:
        record, record_problem = None, str(exc)
    return describe(recent, record, record_problem)


# A record older than this many of beat's intervals says beat's full check has stopped running.
OVERDUE_AFTER_INTERVALS = 2
# How far ahead of this host's clock a record's time may be before it is not believed.
CLOCK_SKEW = timedelta(minutes=5)


def overdue(record: CheckRecord, now: datetime) -> bool:
    """The full check should have run again since `record` (twice over): is beat running?"""
    return now - record.at > timedelta(seconds=OVERDUE_AFTER_INTERVALS * settings.DESK_AUDIT_CHECK_SECONDS)


def describe(
    recent: RecentCheck, record: CheckRecord | None, record_problem: str, *, now: datetime | None = None
) -> ChainStatus:
    """The line for this check and this record (None with `record_problem` when it did not
    verify; None and "" when none was recorded), read at `now`."""
    now = now or timezone.now()
    if record is not None and record.intact and record.at > now + CLOCK_SKEW:
        # Signed, but by a host whose clock runs ahead: taken at its word, it would stay green
        # for as long again past its time. A broken one is believed whenever it was written.
        record_problem = f"it is dated {_time(record.at)}, in the future"
        record = None
    if not recent.intact:
        where = f" at row {recent.first_bad}" if recent.first_bad is not None else ""
        text = f"Hash chain broken{where}: {recent.problem} (checked now)."
        if record is not None and not record.intact:
            text += f" {_full_check_broken(record)}."
        return ChainStatus(BROKEN, text)
    walked = _walked(recent)
    if record is not None and not record.intact:
        return ChainStatus(
            BROKEN, f"{_full_check_broken(record)}; {walked} {_is(recent)} intact, checked now."
        )
    if record is not None and recent.since is not None and overdue(record, now):
        # Intact when last seen in full, but that was long ago: the rows before the newest
        # anchor have gone unchecked since, so the page does not vouch for them in green.
        return ChainStatus(
            UNCHECKED,
            f"Hash chain not checked in full since {_time(record.at)} ({_rows(record.rows)} intact then; "
            f"beat's audit.check should run every {_interval()}): {walked} {_is(recent)} intact, checked "
            f"now; {RUN_THE_FULL_CHECK}.",
        )
    if record is not None:
        full = f"the whole chain ({_rows(record.rows)}) checked in full at {_time(record.at)}"
        return ChainStatus(INTACT, f"Hash chain intact: {walked} checked now; {full}.")
    if record_problem:
        not_full = f"the record of the last full check is not valid ({record_problem}): {RUN_THE_FULL_CHECK}"
    else:
        not_full = f"no full check recorded yet: {RUN_THE_FULL_CHECK}"
    if recent.since is None:
        # No anchor yet: this load walked every row, which is all a full check would (there is
        # no anchor line to check either), so no record is needed to call the chain intact. A
        # record that does not verify is still worth a look: someone wrote that file.
        if record_problem:
            return ChainStatus(UNCHECKED, f"Hash chain intact: {walked} checked now; but {not_full}.")
        return ChainStatus(INTACT, f"Hash chain intact: {walked} checked now.")
    return ChainStatus(
        UNCHECKED,
        f"Hash chain not yet checked in full: {walked} {_is(recent)} intact, checked now; {not_full}.",
    )


def _walked(recent: RecentCheck) -> str:
    """The rows this load walked, and from where."""
    if recent.since is None:
        return f"all {_rows(recent.walked)} (no anchor yet)"
    anchor = recent.since
    where = f"the last anchor (row {anchor.last_id} at {_time(anchor.at)})"
    if recent.walked == 0:
        return f"{where}, with no row since,"
    return f"the {_rows(recent.walked)} since {where}"


def _interval() -> str:
    seconds = settings.DESK_AUDIT_CHECK_SECONDS
    if seconds % 3600 == 0:
        return "hour" if seconds == 3600 else f"{seconds // 3600} hours"
    return "minute" if seconds == 60 else f"{seconds // 60} minutes" if seconds % 60 == 0 else f"{seconds} s"


def _is(recent: RecentCheck) -> str:
    return "is" if recent.walked <= 1 else "are"


def _full_check_broken(record: CheckRecord) -> str:
    where = f" at row {record.first_bad}" if record.first_bad is not None else ""
    return f"Hash chain broken{where}: {record.problem} (the full check at {_time(record.at)})"


def _rows(count: int) -> str:
    """A count of rows, with thousands separators (row ids go without, as the table shows them)."""
    return f"{count:,} row" if count == 1 else f"{count:,} rows"


def _time(moment: datetime | str) -> str:
    """A time as the page's rows show theirs (UTC, to the second); an anchor's signed RFC 3339
    text as it is, should it not parse."""
    if isinstance(moment, str):
        try:
            return _time(datetime.fromisoformat(moment))
        except ValueError:
            return moment
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
