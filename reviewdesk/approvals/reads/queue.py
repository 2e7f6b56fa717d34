"""The desk's queue: the user's pending approvals in the desk's order, one page at a time,
filtered as the page's URL says. The desk page, its socket's snapshot and the terminal read it."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from django.db.models import Case, Exists, IntegerField, OuterRef, Q, QuerySet, Value, When

from reviewdesk.accounts.targets import targets_of
from reviewdesk.approvals.access import approvals_visible_to
from reviewdesk.approvals.models import ApprovalRequest, ApprovalStatus
from reviewdesk.approvals.reads.representation import approval_rows
from reviewdesk.lib.db import NamesAny, comparable_text

if TYPE_CHECKING:
    from django.contrib.auth.models import User

# The desk's queue: one page at a time, whatever the number pending. Twenty cards keep the
# page's time nearly flat from 10 to 10,000 pending (a card costs about as much to render as
# the page's fixed work does per 20 of them: `make bench` #7a); j/k and "next page" move on.
QUEUE_PAGE_SIZE = 20
# Counts stop here: counting 10,000 pending rows would cost more than the page itself. Past it
# the count reads "1000+", a true lower bound the desk keeps moving with live events.
QUEUE_COUNT_CAP = 1000


@dataclass(frozen=True)
class QueueTiers:
    """The desk's "mine, then my groups'": conditions on each row, not lists of row ids, so a
    queue with any number of assigned rows is the same SQL (a list of ids became one bound
    variable each, and SQLite allows 32,766)."""

    targets: frozenset[str]  # the user's name and "group:NAME" for each of their groups
    username: str
    any_assigned: bool  # some of the rows name the user or a group of theirs

    def naming_me(self) -> NamesAny:
        """Rows whose targets name the user, by name or through a group."""
        return NamesAny("assignees", self.targets)


def queue_tiers(rows: QuerySet, user: User) -> QueueTiers:
    """The tiers of `rows` for `user`, and whether any row falls in one: one query for the
    user's groups, one through the partial index over the few assigned rows."""
    targets = frozenset(targets_of(user))
    any_assigned = rows.exclude(assignees=[]).filter(NamesAny("assignees", targets)).exists()
    return QueueTiers(targets=targets, username=user.get_username(), any_assigned=any_assigned)


QUEUE_ORDER = ("expires_at", "created_at", "id")


# The queue's sorts (`?sort=`): "" mine first, then by expiry; "risk" the second opinion's
# high readings first, then its medium (and unavailable) ones, then the rest, each in the usual order.
SORT_RISK = "risk"
QUEUE_SORTS = ("", SORT_RISK)
# The reading filter (`?reading=`): "" any, or the least risk a call must be read at.
READING_FILTERS = {"": (), "medium": ("medium", "high"), "high": ("high",)}
# A reading's rank in "risk first": a ready reading ranks at its risk; pending, low or none are
# "the rest", in the usual order (an unavailable reading is never taken for a low one).
RISK_RANKS = {"high": 0, "medium": 1}
RISK_REST = 2
# An unavailable reading ranks and filters as medium: whoever can make the model fail (an
# argument stuffed so that it writes nonsense) must not thereby sink a call among the low ones.
UNAVAILABLE_AS = "medium"


def reading_risk(payload: Mapping[str, Any]) -> str | None:
    """The risk the queue ranks and filters a call's reading at: a ready reading's own,
    UNAVAILABLE_AS for one that failed, else None."""
    reading = payload.get("reading") or {}
    if reading.get("status") == "unavailable":
        return UNAVAILABLE_AS
    if reading.get("status") != "ready":
        return None
    return str(reading.get("risk"))


def reading_rank(payload: Mapping[str, Any]) -> int:
    return RISK_RANKS.get(str(reading_risk(payload)), RISK_REST)


def _read_at(risks: Sequence[str]) -> Q:
    """Rows whose reading the queue reads at one of `risks` (`reading_risk`, in SQL: the
    reading column is JSON, or null)."""
    ready = Q(reading__status="ready", reading__risk__in=list(risks))
    if UNAVAILABLE_AS in risks:
        return ready | Q(reading__status="unavailable")
    return ready


def queue_sort_key(payload: Mapping[str, Any], username: str, *, sort: str = "") -> list[str]:
    """An approval's place in `username`'s queue, from its payload (`approval_data`), as
    `in_queue_order` reads the rows: with `sort` "risk" the reading's rank first
    (`reading_rank`), then the tier (0 named me, 1 a group of mine, 2 the rest), then
    QUEUE_ORDER's columns as sortable text. The desk sends it with each card, so the page's
    script places a live call where the server's next page would, with no rules of its own:
    lists of these compare as the rows sort (a reading that arrives moves the card)."""
    reviewer = payload.get("reviewer") or {}
    targets, users = reviewer.get("targets") or [], reviewer.get("users") or []
    tier = "0" if username in targets else "1" if username in users else "2"
    rank = [str(reading_rank(payload))] if sort == SORT_RISK else []
    return [
        *rank,
        tier,
        payload.get("expires_at") or "",
        payload.get("created_at") or "",
        str(payload.get("id", "")),
    ]


def queue_matches(payload: Mapping[str, Any], filters: QueueFilters, username: str) -> bool:
    """Whether the approval whose payload this is passes `filters` for `username`, as
    `approvals_queue_for` filters the rows (a name reads the targets: the calls that name it,
    not those reaching the user through a group)."""
    reviewer = payload.get("reviewer") or {}
    targets, users = reviewer.get("targets") or [], reviewer.get("users") or []
    checks = (
        not filters.agent or payload.get("agent") == filters.agent,
        not filters.tool or payload.get("tool") == filters.tool,
        not filters.run or payload.get("run") == filters.run,
        not filters.kind or payload.get("kind") == filters.kind,
        filters.assignee != "me" or username in users,
        filters.assignee != "any" or not targets,
        filters.assignee in ("", "me", "any") or filters.assignee in targets,
        not filters.reading or _reading_passes(payload, READING_FILTERS.get(filters.reading, ())),
    )
    return all(checks)


def _reading_passes(payload: Mapping[str, Any], risks: Sequence[str]) -> bool:
    return reading_risk(payload) in risks


def in_sorted_order(rows: QuerySet, tiers: QueueTiers, sort: str) -> list[QuerySet]:
    """`rows` in the order `sort` names, as parts read one after another: with "risk", the
    high readings, then the medium and unavailable ones, then the rest, each in the queue's order."""
    if sort != SORT_RISK:
        return in_queue_order(rows, tiers)
    ranked = rows.annotate(
        risk_rank=Case(
            *(When(_read_at([risk]), then=Value(rank)) for risk, rank in RISK_RANKS.items()),
            default=Value(RISK_REST),
            output_field=IntegerField(),
        )
    )
    ranks = [*RISK_RANKS.values(), RISK_REST]
    return [part for rank in ranks for part in in_queue_order(ranked.filter(risk_rank=rank), tiers)]


def in_queue_order(rows: QuerySet, tiers: QueueTiers) -> list[QuerySet]:
    """`rows` in the queue's order, as parts to read one after the other: the rows naming me
    (by name, then through a group of mine, each by expiry), then the rest by expiry.

    With no call named me or my groups (the common queue) that is one part, which the
    approval_queue_order index (status, expires_at, created_at, id) gives in order. Else each
    tier is a part of its own, read in order through an index (approval_targeted for mine):
    sorted by the tier as one list, every pending row was sorted to draw one page (the socket's
    snapshot, in-process on SQLite with 10,000 pending and a quarter of them for a group of the
    reviewer's: 30 ms, against 14 ms in parts)."""
    if not tiers.any_assigned:
        return [rows.order_by(*QUEUE_ORDER)]
    assigned = rows.exclude(assignees=[])  # the partial index's condition, as it words it
    by_name = NamesAny("assignees", [tiers.username])
    by_group = NamesAny("assignees", tiers.targets - {tiers.username})
    return [
        assigned.filter(by_name).order_by(*QUEUE_ORDER),
        assigned.filter(by_group).exclude(by_name).order_by(*QUEUE_ORDER),
        rows.exclude(tiers.naming_me()).order_by(*QUEUE_ORDER),
    ]


def approvals_pending_for(user: User) -> QuerySet[ApprovalRequest]:
    """Pending and waiting for this user: not those whose quorum already has their vote. The
    rows alone: the queue reads a page's relations for its window (`reads.representation.approval_rows`)."""
    pending = approvals_visible_to(user, related=False, status=ApprovalStatus.PENDING)
    return pending.exclude(decisions__reviewer=user).order_by("created_at")


@dataclass(frozen=True)
class QueueFilters:
    agent: str = ""
    tool: str = ""
    run: str = ""
    assignee: str = ""  # "" anyone, "me", "any" (open to every reviewer), or a username
    kind: str = ""  # "" every kind, or one ApprovalKind ("question": the desk's Questions tab)
    reading: str = ""  # "" any, "medium" (medium and up) or "high": the second opinion's risk
    sort: str = ""  # not a filter: the order (QUEUE_SORTS), kept with the filters in every link


# The queue's view as a URL's query names it: the desk page's, and its socket's (the same page).
QUEUE_FILTER_NAMES = ("agent", "tool", "run", "assignee", "kind", "reading", "sort")
# The furthest offset a URL may ask for: past it every page is empty anyway, and the database's
# integer (a bigint, and SQLite's) must not overflow on a number someone typed.
QUEUE_MAX_OFFSET = 10**9
# The deepest a page may start (500 pages of 20). The window reads the rows before the page,
# so an offset of a billion walked every pending call (to draw nothing); capped, no read goes
# further than this and a page, however many are pending. The filters reach the rest.
QUEUE_MAX_PAGE_OFFSET = 10_000


def queue_view_from(params: Mapping[str, str]) -> tuple[QueueFilters, int]:
    """The filters and the offset a query asks for (`agent`, `tool`, `run`, `assignee`,
    `offset`); what is missing, malformed or out of range reads as "none" or 0."""
    filters = QueueFilters(
        **{name: comparable_text(str(params.get(name, ""))).strip()[:200] for name in QUEUE_FILTER_NAMES}
    )
    if filters.reading not in READING_FILTERS:
        filters = replace(filters, reading="")
    if filters.sort not in QUEUE_SORTS:
        filters = replace(filters, sort="")
    try:
        offset = int(str(params.get("offset", 0)))
    except ValueError:
        offset = 0
    return filters, offset if 0 <= offset <= QUEUE_MAX_OFFSET else 0


@dataclass(frozen=True)
class QueuePage:
    approvals: Sequence[ApprovalRequest]
    total: int  # pending for this user, filters aside (the tab title's count), at most the cap
    matching: int  # pending and matching the filters, at most the cap
    offset: int
    next_offset: int | None
    prev_offset: int | None
    total_capped: bool = False  # more than `total` are pending: show "1000+"
    matching_capped: bool = False
    deeper: bool = False  # matching calls follow, past the deepest page (QUEUE_MAX_PAGE_OFFSET)


def _capped_count(rows: QuerySet) -> tuple[int, bool]:
    """How many `rows` there are, counting no further than QUEUE_COUNT_CAP; and whether more."""
    counted = rows.order_by()[: QUEUE_COUNT_CAP + 1].count()
    return min(counted, QUEUE_COUNT_CAP), counted > QUEUE_COUNT_CAP


def _window(rows: QuerySet, parts: list[QuerySet], offset: int) -> tuple[list[ApprovalRequest], bool]:
    """The page at `offset` of `parts` (of `rows`) read one after another, with what a card shows
    of each; and whether another page follows (one row past the page says so: the count may
    have stopped short). One part is one read. Several are read each no further than the
    window's end: their ids, then the window's rows by id, still matching `rows`, with their
    votes (five reads for three parts, whatever is pending).

    The parts are read one statement each, so a call that changes tier in between (a hand-over
    to a group of mine, an escalation naming me) may be read twice, kept once, or in neither:
    its approval.updated commits after the sequence the snapshot and the page were read at, and
    reaches their socket. A call decided before its row is read drops out of the page, and the
    next page is still offered: whether one follows is the ids' to say."""
    stop = offset + QUEUE_PAGE_SIZE + 1
    if len(parts) == 1:
        window = list(approval_rows(parts[0])[offset:stop])
        return window[:QUEUE_PAGE_SIZE], len(window) > QUEUE_PAGE_SIZE
    read = (pk for part in parts for pk in part.values_list("pk", flat=True)[:stop])
    ids = list(dict.fromkeys(read))[offset:stop]
    shown = ids[:QUEUE_PAGE_SIZE]
    # Driven by the ids, each checked against `rows` on its own (EXISTS, by primary key): with
    # `rows.filter(pk__in=shown)` SQLite, which keeps no statistics, walked every pending row
    # through the status index to find twenty (`make bench` #7 on the embedded default).
    still = rows.filter(pk=OuterRef("pk"))
    by_id = ApprovalRequest.objects.filter(pk__in=shown).filter(Exists(still)).order_by()
    found = {row.pk: row for row in approval_rows(by_id)}
    return [found[pk] for pk in shown if pk in found], len(ids) > QUEUE_PAGE_SIZE


def approvals_queue_for(user: User, filters: QueueFilters, *, offset: int = 0) -> QueuePage:
    """The user's pending approvals: assigned to them by name first, then to a group of
    theirs ("group:NAME"), then the rest, each tier by expiry (soonest first); filtered,
    one page, read with what a card shows of each (`approval_rows`). A fixed number of queries
    whatever the number pending; none of them reads more than QUEUE_COUNT_CAP rows, or the rows
    before the page and the page itself. No page starts past QUEUE_MAX_PAGE_OFFSET, and an
    offset past the counted end (the count is exact below the cap) is the last real page."""
    pending = approvals_pending_for(user)
    tiers = queue_tiers(pending, user)
    total, total_capped = _capped_count(pending)
    rows = pending
    if filters.agent:
        rows = rows.filter(run__agent=filters.agent)
    if filters.tool:
        rows = rows.filter(tool=filters.tool)
    if filters.run:
        try:
            rows = rows.filter(run_id=uuid.UUID(filters.run))
        except ValueError:
            rows = rows.none()
    if filters.kind:
        rows = rows.filter(kind=filters.kind)
    if filters.assignee == "me":
        rows = rows.filter(tiers.naming_me())
    elif filters.assignee == "any":
        rows = rows.filter(assignees=[])
    elif filters.assignee:
        rows = rows.filter(NamesAny("assignees", [filters.assignee]))
    if filters.reading:
        rows = rows.filter(_read_at(READING_FILTERS[filters.reading]))
    filtered = rows is not pending
    matching, matching_capped = _capped_count(rows) if filtered else (total, total_capped)
    offset = min(max(0, offset), QUEUE_MAX_PAGE_OFFSET)
    if offset and offset >= matching and not matching_capped:  # past the end
        offset = (matching - 1) // QUEUE_PAGE_SIZE * QUEUE_PAGE_SIZE if matching else 0
    window, more = _window(rows, in_sorted_order(rows, tiers, filters.sort), offset)
    deeper = more and offset + QUEUE_PAGE_SIZE > QUEUE_MAX_PAGE_OFFSET
    return QueuePage(
        approvals=window,
        total=total,
        matching=matching,
        offset=offset,
        next_offset=offset + QUEUE_PAGE_SIZE if more and not deeper else None,
        prev_offset=max(0, offset - QUEUE_PAGE_SIZE) if offset > 0 else None,
        total_capped=total_capped,
        matching_capped=matching_capped,
        deeper=deeper,
    )
