"""The queue's order: assigned to me by name, then to a group of mine, then the rest, each
tier by expiry; the desk page draws the same order; the query count does not grow with the
queue. In-process, on the test database."""

from __future__ import annotations

import sqlite3

from django.contrib.auth.models import Group
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from reviewdesk.approvals.models import ApprovalRequest
from reviewdesk.approvals.reads.queue import QUEUE_PAGE_SIZE, QueueFilters, approvals_queue_for
from tests.reviewdesk.desk.test_snapshot_window import clone_pending, desk_page_ids


def tier_of(approval: ApprovalRequest) -> int:
    if "alice" in approval.assignees:
        return 0
    return 1 if "group:billing" in approval.assignees else 2


def queued(user, filters: QueueFilters | None = None) -> tuple[list[ApprovalRequest], int]:
    with CaptureQueriesContext(connection) as queries:
        page = approvals_queue_for(user, filters or QueueFilters())
    return list(page.approvals), len(queries)


def fill(approval: ApprovalRequest, n: int) -> None:
    clone_pending(approval, n)  # open to every reviewer
    clone_pending(approval, n, assignees=["group:billing"])
    clone_pending(approval, n, assignees=["alice"])
    clone_pending(approval, n, assignees=["bob", "group:billing"])  # her group's, though bob is named
    clone_pending(approval, n, assignees=["group:legal"])  # not hers: not in her queue


def test_mine_then_my_groups_then_the_rest_each_by_expiry_with_a_constant_query_count(
    interrupted_run, personas
):
    Group.objects.get_or_create(name="billing")[0].user_set.add(personas.alice)
    Group.objects.get_or_create(name="legal")
    _, approval = interrupted_run()
    fill(approval, 3)
    few, few_queries = queued(personas.alice)
    assert len(few) == 1 + 3 * 4
    tiers = [tier_of(a) for a in few]
    assert tiers == sorted(tiers) and tiers[:3] == [0, 0, 0] and tiers[3:9] == [1] * 6
    for tier in (0, 1, 2):
        expiries = [a.expires_at for a in few if tier_of(a) == tier]
        assert expiries == sorted(expiries)
    assert desk_page_ids(personas.alice) == [str(a.id) for a in few]

    fill(approval, 5)
    many, many_queries = queued(personas.alice)
    assert many_queries == few_queries
    page = [0] * 8 + [1] * (QUEUE_PAGE_SIZE - 8)  # 8 hers, 16 her group's: one page
    assert QUEUE_PAGE_SIZE < 8 + 16
    assert [tier_of(a) for a in many] == page
    # "Assigned to me" keeps both of her tiers, in the same order.
    assigned, _ = queued(personas.alice, QueueFilters(assignee="me"))
    assert [tier_of(a) for a in assigned] == page


def test_bob_outside_the_group_sees_his_named_calls_first_and_no_group_tier(interrupted_run, personas):
    Group.objects.get_or_create(name="billing")[0].user_set.add(personas.alice)
    _, approval = interrupted_run()
    fill(approval, 2)
    page, _ = queued(personas.bob)
    assert [("bob" in a.assignees) for a in page] == [True, True] + [False] * 3  # then the open ones
    assert all(not a.assignees for a in page[2:])


def test_a_queue_with_more_assigned_calls_than_sqlite_has_variables_still_opens(
    interrupted_run, personas, request
):
    """SQLite's default build binds at most 32,766 variables a statement: the
    tiers are conditions on rows, not lists of row ids, so 33,000 calls naming alice still give
    her page (mine first, by expiry) and her "assigned to me" filter."""
    if connection.vendor == "sqlite":  # Debian's build allows 250,000: hold it to the default
        connection.ensure_connection()
        was = connection.connection.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 32_766)
        request.addfinalizer(
            lambda: connection.connection.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, was)
        )
    _, approval = interrupted_run()
    clone_pending(approval, 33_000, assignees=["alice"])
    page, _ = queued(personas.alice)
    assert len(page) == QUEUE_PAGE_SIZE and all(a.assignees == ["alice"] for a in page)
    assert [a.expires_at for a in page] == sorted(a.expires_at for a in page)
    mine = approvals_queue_for(personas.alice, QueueFilters(assignee="me"))
    assert mine.matching_capped and len(mine.approvals) == QUEUE_PAGE_SIZE


def test_a_page_of_group_assigned_calls_reads_as_much_at_twenty_cards_as_at_five_and_no_run_output(
    interrupted_run, personas
):
    """In-process: the desk page and its socket's snapshot (the consumer's read, called here
    directly) take the same statements for 20 cards as for 5, cards assigned to groups among
    them, whose members the cards name; and none reads a run's output or metadata."""
    from reviewdesk.desk import consumers
    from reviewdesk.runs.models import Run

    Group.objects.get_or_create(name="billing")[0].user_set.add(personas.alice, personas.admin)
    Group.objects.get_or_create(name="legal")
    run, approval = interrupted_run()
    Run.objects.filter(pk=run.pk).update(output="x" * 100_000, metadata={"big": "y" * 10_000})
    client = Client()
    client.force_login(personas.alice)
    reads, cards = {}, {}
    for more in (1, 4):
        fill(approval, more)
        with CaptureQueriesContext(connection) as page:
            assert client.get("/").status_code == 200
        with CaptureQueriesContext(connection) as snapshot:
            cards[more] = consumers._snapshot.func(personas.alice)["data"]["approvals"]
        reads[more] = (
            [q["sql"] for q in page.captured_queries],
            [q["sql"] for q in snapshot.captured_queries],
        )
    assert len(cards[1]) == 5 and len(cards[4]) == QUEUE_PAGE_SIZE
    for few, many in zip(reads[1], reads[4], strict=True):
        assert len(few) == len(many), "\n".join(s[:150] for s in [*few, "--", *many])
        assert not [sql for sql in many if '"runs_run"."output"' in sql or '"runs_run"."metadata"' in sql]
    users = {tuple(card["reviewer"]["targets"]): card["reviewer"]["users"] for card in cards[4]}
    assert users[("group:billing",)] == ["admin", "alice"]
    assert users[("bob", "group:billing")] == ["admin", "alice", "bob"]
    assert users[("alice",)] == ["alice"]


def test_pages_across_the_tiers_hold_every_call_once_in_the_queues_order(interrupted_run, personas):
    """Each tier is read on its own (approvals.reads.queue.in_queue_order): a page that starts in
    one tier and ends in the next, and the one after, still follow the one order."""
    Group.objects.get_or_create(name="billing")[0].user_set.add(personas.alice)
    _, approval = interrupted_run()
    fill(approval, 9)  # 9 hers, 18 her group's, 10 open: a page ends inside her group's tier
    expected = sorted(
        ApprovalRequest.objects.filter(status="pending").exclude(assignees=["group:legal"]),
        key=lambda a: (tier_of(a), a.expires_at, a.created_at, a.id),
    )
    seen, offset = [], 0
    while offset is not None:
        page = approvals_queue_for(personas.alice, QueueFilters(), offset=offset)
        seen += page.approvals
        offset = page.next_offset
    assert [a.id for a in seen] == [a.id for a in expected] and len(seen) == 37
    assert approvals_queue_for(personas.alice, QueueFilters(), offset=15).approvals == seen[15:35]


def after_the_tier_read(number: int, change):
    """An execute wrapper that calls `change` once the queue's `number`th tier read has run."""
    reads = []

    def wrapper(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if sql.startswith('SELECT "approvals_approvalrequest"."id" AS "pk"'):
            reads.append(sql)
            if len(reads) == number:
                change()
        return result

    wrapper.reads = reads
    return wrapper


def test_a_call_decided_while_the_tiers_are_read_is_not_shown_and_the_next_page_still_is(
    interrupted_run, personas
):
    """In-process: the page reads its tiers' ids, then their rows. One decided in between
    (here: set approved right after the last tier's read) drops out of the page instead of
    coming back as a card that is no longer pending, and the pages after it are still offered."""
    Group.objects.get_or_create(name="billing")[0].user_set.add(personas.alice)
    _, approval = interrupted_run()
    fill(approval, 9)  # 37 for alice: two pages
    first = approvals_queue_for(personas.alice, QueueFilters()).approvals[0]
    wrapper = after_the_tier_read(
        3, lambda: ApprovalRequest.objects.filter(pk=first.pk).update(status="approved")
    )
    with connection.execute_wrapper(wrapper):
        page = approvals_queue_for(personas.alice, QueueFilters())
    assert len(wrapper.reads) == 3
    assert first.pk not in {a.pk for a in page.approvals}
    assert all(a.status == "pending" for a in page.approvals) and len(page.approvals) == QUEUE_PAGE_SIZE - 1
    assert page.next_offset == QUEUE_PAGE_SIZE


def test_a_call_handed_to_her_group_while_the_tiers_are_read_is_shown_once(interrupted_run, personas):
    """In-process: a call named alice is read with her tier, then handed to her group before
    the group's tier is read, which reads it again: the page shows it once, where it was first."""
    Group.objects.get_or_create(name="billing")[0].user_set.add(personas.alice)
    _, approval = interrupted_run()
    fill(approval, 2)
    first = approvals_queue_for(personas.alice, QueueFilters()).approvals[0]
    assert first.assignees == ["alice"]
    moved = lambda: ApprovalRequest.objects.filter(pk=first.pk).update(assignees=["group:billing"])  # noqa: E731
    with connection.execute_wrapper(after_the_tier_read(1, moved)):
        page = approvals_queue_for(personas.alice, QueueFilters())
    ids = [a.pk for a in page.approvals]
    assert ids.count(first.pk) == 1 and ids[0] == first.pk and len(ids) == len(set(ids)) == 9


def test_what_the_cards_and_the_terminal_read_of_a_pages_runs_comes_with_the_page(interrupted_run, personas):
    """In-process: the queue reads a run's columns for its cards (and the terminal's context, its
    status) with the page, so showing them costs no query per card."""
    _, approval = interrupted_run()
    fill(approval, 2)
    page = approvals_queue_for(personas.alice, QueueFilters())
    with CaptureQueriesContext(connection) as queries:
        shown = [
            (a.run.status, a.run.agent, a.run.input, a.run.submitted_by.get_username())
            for a in page.approvals
        ]
    assert len(queries) == 0 and len(shown) == 5
    assert shown[0] == ("input_required", "demo", "Tell Ada her refund is on its way.", "carol")
