"""Each read of the pending approvals seeks through its own index, on SQLite's plan (the
embedded default, where the planner has no statistics to choose by): the API's newest-first
page without sorting every pending row and with the assignment check a condition on its rows
(NamesAny), the desk's tiers through the partial index over the few assigned rows, the desk's
page in queue order. `make bench` #7 measures the time;
this checks the plans that keep it flat. (PostgreSQL chooses by statistics: see
ApprovalRequest.Meta.indexes.)"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import Group
from django.db import connection

from reviewdesk.accounts.roles import is_admin, is_reviewer
from reviewdesk.approvals.access import named_by
from reviewdesk.approvals.models import ApprovalRequest
from reviewdesk.approvals.reads.queue import QueueFilters, approvals_queue_for
from tests.reviewdesk.desk.test_snapshot_window import clone_pending
from tests.reviewdesk.query_capture import statements_reading

pytestmark = pytest.mark.django_db
sqlite_plan = pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's EXPLAIN QUERY PLAN")

TABLE = '"approvals_approvalrequest"'


def plans_of(action: Callable[[], object]) -> list[tuple[str, str]]:
    """(SQL, its plan) of each query `action` makes that reads the approvals table."""
    out = []
    with connection.cursor() as cursor:
        for sql, params in statements_reading(action, "approvals_approvalrequest"):
            cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
            out.append((sql, "\n".join(str(row[-1]) for row in cursor.fetchall())))
    return out


def targeting_reads(plans: list[tuple[str, str]]) -> list[str]:
    """Plans of the assignment checks that read assigned rows on their own: the desk's "does
    any row name me" (an EXISTS), or a list of every assigned row's ids and targets."""
    heads = (f'SELECT %s AS "a" FROM {TABLE}', f'SELECT {TABLE}."id" AS "id", {TABLE}."assignees"')
    return [plan for sql, plan in plans if sql.startswith(heads)]


def page_reads(plans: list[tuple[str, str]]) -> list[str]:
    """Plans of the reads that fetch the page itself: whole rows (the desk's models) or the
    columns a payload shows (the API's list, `values()`: each column named as itself)."""
    heads = (f'SELECT {TABLE}."id", {TABLE}."kind"', f'SELECT {TABLE}."id" AS "id", {TABLE}."kind" AS "kind"')
    return [plan for sql, plan in plans if sql.startswith(heads)]


@pytest.fixture
def pending(interrupted_run):
    _, approval = interrupted_run()
    clone_pending(approval, 60)
    clone_pending(approval, 3, assignees=["alice"])
    clone_pending(approval, 3, assignees=["group:legal"])
    return approval


@sqlite_plan
def test_the_api_list_reads_one_page_newest_first_without_sorting_every_pending_row(
    pending, personas, api_as
):
    client = api_as(personas.alice, "review")
    responses = []
    plans = plans_of(lambda: responses.append(client.get("/api/v1/approvals?status=pending&limit=5")))
    assert responses[0].status_code == 200 and responses[0].json()["next"]
    [page] = page_reads(plans)
    assert "USING INDEX approval_newest (status=?)" in page, page
    assert "TEMP B-TREE" not in page, page
    # The assignment check is a condition on the page's rows: no read of every assigned row first.
    assert targeting_reads(plans) == []

    # The next page starts at its cursor: a seek, not a read of every newer row.
    plans = plans_of(lambda: client.get(responses[0].json()["next"]))
    [page] = page_reads(plans)
    assert "USING INDEX approval_newest (status=? AND created_at<?)" in page, page
    assert "TEMP B-TREE" not in page, page


@sqlite_plan
def test_the_desk_queue_finds_the_assigned_rows_through_the_partial_index(pending, personas):
    plans = plans_of(lambda: approvals_queue_for(personas.bob, QueueFilters()))
    targeting = targeting_reads(plans)
    assert len(targeting) == 1  # the tiers' (mine, my groups'): the visibility check reads none
    for plan in targeting:
        assert "USING INDEX approval_targeted" in plan, plan
        assert "TEMP B-TREE" not in plan, plan


@sqlite_plan
def test_the_desk_page_with_nothing_assigned_to_the_reviewer_reads_in_queue_order(pending, personas):
    ApprovalRequest.objects.exclude(assignees=[]).delete()
    [page] = page_reads(plans_of(lambda: approvals_queue_for(personas.bob, QueueFilters())))
    assert "USING INDEX approval_queue_order (status=?)" in page, page
    assert "TEMP B-TREE" not in page, page


@sqlite_plan
def test_the_desk_page_reads_each_of_the_reviewers_tiers_in_queue_order_sorting_none(pending, personas):
    """Alice is named on some calls, and her group on others: each tier is read in order
    through an index, stopping at a page, and the page's rows by id; nothing sorts them all."""
    Group.objects.get_or_create(name="billing")[0].user_set.add(personas.alice)
    clone_pending(pending, 3, assignees=["group:billing"])
    plans = plans_of(lambda: approvals_queue_for(personas.alice, QueueFilters()))
    by_name, by_group, rest = [plan for sql, plan in plans if sql.startswith(f'SELECT {TABLE}."id" AS "pk"')]
    assert "USING INDEX approval_targeted (status=?)" in by_name, by_name
    assert "USING INDEX approval_targeted (status=?)" in by_group, by_group
    assert "USING INDEX approval_queue_order (status=?)" in rest, rest
    [page] = page_reads(plans)
    for plan in (by_name, by_group, rest, page):
        assert "TEMP B-TREE" not in plan, plan


@pytest.mark.parametrize("who", ["alice", "bob", "admin", "carol"])
def test_the_api_shows_a_reviewer_what_the_routing_rule_names_them_for(
    interrupted_run, personas, api_as, who
):
    """NamesAny (SQL, row by row) and the routing rule in Python pick the same approvals."""
    Group.objects.get_or_create(name="billing")[0].user_set.add(personas.alice)
    _, approval = interrupted_run()
    for assignees in (
        ["alice"],
        ["group:billing"],
        ["bob", "group:billing"],
        ["group:legal"],
        ["bob"],
        ["alicea"],
        ["group:alice"],
        ["ALICE"],
    ):
        clone_pending(approval, 2, assignees=assignees)
    user = getattr(personas, who)
    response = api_as(user, "review").get("/api/v1/approvals?status=pending&limit=200")
    shown = {item["id"] for item in response.json()["results"]} if response.status_code == 200 else set()
    everything = ApprovalRequest.objects.filter(status="pending")
    if is_admin(user):
        expected = set(everything)
    elif is_reviewer(user):
        expected = {a for a in everything if not a.assignees or named_by(user, a.assignees)}
    else:
        expected = set()
    assert shown == {str(a.pk) for a in expected}
    if who == "alice":  # by name, through her group, and not by a prefix, a case or a group named like her
        assert {tuple(a.assignees) for a in expected} == {
            (),
            ("alice",),
            ("group:billing",),
            ("bob", "group:billing"),
        }
