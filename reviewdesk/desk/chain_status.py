"""The audit page's line on the hash chain: what was checked on this load, what beat's last
sweep walked, and what the last full check found, each with its time.

The page checks only what is new (`audit_check_recent`: the newest anchor and the rows after
it). The rows before the newest anchor it vouches for on the word of beat's sweep (`sweep_read`:
a window of rows a minute, round the chain; reviewdesk/audit/sweep.py) and of beat's full check
(`check_record_read`), each recorded, signed, outside the database: green only when both are
valid and recent, or when there is no anchor yet and this load walked every row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from reviewdesk.audit.check_record import CheckRecord, SignedFileInvalid, check_record_read
from reviewdesk.audit.sweep import SweepRecord, sweep_read
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

    @property
    def lines(self) -> list[str]:
        """The text a clause at a time, each with its separator: the page sets them one under
        another (what was checked now, swept, checked in full), and the text reads and copies
        as it is."""
        parts = self.text.split("; ")
        return [f"{part}; " for part in parts[:-1]] + parts[-1:]


def chain_status() -> ChainStatus:
    """Check the rows since the newest anchor now, read the last sweep's and the last full
    check's records, and say all three."""
    recent = audit_check_recent()
    record, record_problem = _read(check_record_read)
    sweep, sweep_problem = _read(sweep_read)
    return describe(recent, record, record_problem, sweep=sweep, sweep_problem=sweep_problem)


def _read(reader: Callable[[], Any]) -> tuple[Any, str]:
    """(the signed record, "") or (None, why it is not valid); (None, "") when there is none."""
    try:
        return reader(), ""
    except SignedFileInvalid as exc:
        return None, str(exc)


# A record older than this many of beat's intervals says beat's task has stopped running.
OVERDUE_AFTER_INTERVALS = 2
# How far ahead of this host's clock a record's time may be before it is not believed.
CLOCK_SKEW = timedelta(minutes=5)


def overdue(record: CheckRecord, now: datetime) -> bool:
    """The full check should have run again since `record` (twice over): is beat running?"""
    return now - record.at > timedelta(seconds=OVERDUE_AFTER_INTERVALS * settings.DESK_AUDIT_CHECK_SECONDS)


def sweep_overdue(sweep: SweepRecord, now: datetime) -> bool:
    """The sweep should have run again since `sweep` (twice over): is beat running?"""
    return now - sweep.at > timedelta(seconds=OVERDUE_AFTER_INTERVALS * settings.DESK_AUDIT_SWEEP_SECONDS)


def describe(
    recent: RecentCheck,
    record: CheckRecord | None,
    record_problem: str,
    *,
    sweep: SweepRecord | None = None,
    sweep_problem: str = "",
    now: datetime | None = None,
) -> ChainStatus:
    """The line for this check, the last full check's record and the last sweep's (each None
    with its problem when it did not verify; None and "" when none was recorded), read at `now`."""
    now = now or timezone.now()
    if record is not None and record.intact and record.at > now + CLOCK_SKEW:
        # Signed, but by a host whose clock runs ahead: taken at its word, it would stay green
        # for as long again past its time. A broken one is believed whenever it was written.
        record_problem = f"it is dated {_time(record.at)}, in the future"
        record = None
    if sweep is not None and sweep.intact and sweep.at > now + CLOCK_SKEW:
        sweep_problem = f"it is dated {_time(sweep.at)}, in the future"
        sweep = None
    found = [
        *([_full_check_broken(record)] if record is not None and not record.intact else []),
        *([_sweep_broken(sweep)] if sweep is not None and not sweep.intact else []),
    ]
    if not recent.intact:
        where = f" at row {recent.first_bad}" if recent.first_bad is not None else ""
        text = f"Hash chain broken{where}: {recent.problem} (checked now)."
        return ChainStatus(BROKEN, " ".join([text, *(f"{line}." for line in found)]))
    walked = _walked(recent)
    if found:
        return ChainStatus(BROKEN, f"{'; '.join(found)}; {walked} {_is(recent)} intact, checked now.")
    if recent.since is None:
        # No anchor yet: this load walked every row, which is all a full check would (there is
        # no anchor line to check either), so no record is needed to call the chain intact. A
        # record that does not verify is still worth a look: someone wrote that file.
        if record_problem:
            return ChainStatus(
                UNCHECKED, f"Hash chain intact: {walked} checked now; but {_not_full(record_problem)}."
            )
        return ChainStatus(INTACT, f"Hash chain intact: {walked} checked now.")
    swept = _swept(sweep, sweep_problem, now)
    if record is not None and overdue(record, now):
        # Intact when last seen in full, but that was long ago: the anchor lines before the
        # newest have gone unchecked since, so the page does not vouch for them in green.
        return ChainStatus(
            UNCHECKED,
            f"Hash chain not checked in full since {_time(record.at)} ({_rows(record.rows)} intact then; "
            f"beat's audit.check should run every {_interval(settings.DESK_AUDIT_CHECK_SECONDS)}): "
            f"{walked} {_is(recent)} intact, checked now; {swept}; {RUN_THE_FULL_CHECK}.",
        )
    if record is None:
        return ChainStatus(
            UNCHECKED,
            f"Hash chain not yet checked in full: {walked} {_is(recent)} intact, checked now; {swept}; "
            f"{_not_full(record_problem)}.",
        )
    full = f"the whole chain ({_rows(record.rows)}) checked in full at {_time(record.at)}"
    if sweep is None or sweep_overdue(sweep, now):
        # The rows before the newest anchor are vouched for only by the full check, which an
        # edit made since does not show in: not green.
        since = "" if sweep is None else f" since {_time(sweep.at)}"
        return ChainStatus(
            UNCHECKED,
            f"Hash chain not swept{since}: {walked} {_is(recent)} intact, checked now; {swept}; {full}.",
        )
    return ChainStatus(INTACT, f"Hash chain intact: {walked} checked now; {swept}; {full}.")


def _not_full(record_problem: str) -> str:
    if record_problem:
        return f"the record of the last full check is not valid ({record_problem}): {RUN_THE_FULL_CHECK}"
    return f"no full check recorded yet: {RUN_THE_FULL_CHECK}"


def _swept(sweep: SweepRecord | None, sweep_problem: str, now: datetime) -> str:
    """What the last sweep walked and when, and the last lap it completed; or why none counts."""
    every = _interval(settings.DESK_AUDIT_SWEEP_SECONDS)
    if sweep is None:
        if sweep_problem:
            return f"the record of the last sweep is not valid ({sweep_problem}): wait for beat's audit.sweep"
        return f"no sweep of the older rows recorded yet: beat's audit.sweep runs every {every}"
    walked = "no row" if sweep.first is None else f"rows {sweep.first}\N{EN DASH}{sweep.last}"
    if sweep_overdue(sweep, now):
        return f"{walked} last swept at {_time(sweep.at)} (beat's audit.sweep should run every {every})"
    if sweep.lap_done is None:
        lap = f"the first lap round the chain under way since {_time(sweep.lap_began)}"
    else:
        lap = f"every row to row {sweep.lap_to} swept since {_time(sweep.lap_done)}"
    return f"{walked} swept at {_time(sweep.at)} ({lap})"


def _sweep_broken(sweep: SweepRecord) -> str:
    where = f" at row {sweep.first_bad}" if sweep.first_bad is not None else ""
    return f"Hash chain broken{where}: {sweep.problem} (the sweep at {_time(sweep.at)})"


def _walked(recent: RecentCheck) -> str:
    """The rows this load walked, and from where."""
    if recent.since is None:
        return f"all {_rows(recent.walked)} (no anchor yet)"
    anchor = recent.since
    where = f"the last anchor (row {anchor.last_id} at {_time(anchor.at)})"
    if recent.walked == 0:
        return f"{where}, with no row since,"
    return f"the {_rows(recent.walked)} since {where}"


def _interval(seconds: int) -> str:
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
