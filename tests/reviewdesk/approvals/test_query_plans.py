"""Each read of the pending approvals seeks through its own index, on SQLite's plan (the
embedded default, where the planner has no statistics to choose by): the API's newest-first
page without sorting every pending row, the assignment check through the partial index over
the few assigned rows, the desk's page in queue order. `make bench` #7 measures the time;
this checks the plans that keep it flat. (PostgreSQL chooses by statistics: see
ApprovalRequest.Meta.indexes.)"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.db import connection

from reviewdesk.approvals.models import ApprovalRequest
from reviewdesk.approvals.queue import QueueFilters, approvals_queue_for
from tests.reviewdesk.events.test_snapshot_window import clone_pending

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's EXPLAIN QUERY PLAN"),
]

TABLE = '"approvals_approvalrequest"'


def plans_of(action: Callable[[], object]) -> list[tuple[str, str]]:
    """(SQL, its plan) of each query `action` makes that reads the approvals table."""
    seen: list[tuple[str, tuple]] = []

    def record(execute, sql, params, many, context):
        if f"FROM {TABLE}" in sql:
            seen.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        action()
    out = []
    with connection.cursor() as cursor:
        for sql, params in seen:
            cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
            out.append((sql, "\n".join(str(row[-1]) for row in cursor.fetchall())))
    return out


def targeting_reads(plans: list[tuple[str, str]]) -> list[str]:
    """Plans of the assignment check's reads: ids and target lists of the assigned rows."""
    head = f'SELECT {TABLE}."id" AS "id", {TABLE}."assignees" AS "assignees" FROM'
    return [plan for sql, plan in plans if sql.startswith(head)]


def page_reads(plans: list[tuple[str, str]]) -> list[str]:
    """Plans of the reads that fetch whole rows (the page itself)."""
    return [plan for sql, plan in plans if sql.startswith(f'SELECT {TABLE}."id", {TABLE}."kind"')]


@pytest.fixture
def pending(interrupted_run):
    _, approval = interrupted_run()
    clone_pending(approval, 60)
    clone_pending(approval, 3, assignees=["alice"])
    clone_pending(approval, 3, assignees=["group:legal"])
    return approval


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
    [targeting] = targeting_reads(plans)
    assert "USING INDEX approval_targeted" in targeting, targeting

    # The next page starts at its cursor: a seek, not a read of every newer row.
    plans = plans_of(lambda: client.get(responses[0].json()["next"]))
    [page] = page_reads(plans)
    assert "USING INDEX approval_newest (status=? AND created_at<?)" in page, page
    assert "TEMP B-TREE" not in page, page


def test_the_desk_queue_finds_the_assigned_rows_through_the_partial_index(pending, personas):
    plans = plans_of(lambda: approvals_queue_for(personas.bob, QueueFilters()))
    targeting = targeting_reads(plans)
    assert len(targeting) == 2  # the visibility check's and the tiers'
    for plan in targeting:
        assert "USING INDEX approval_targeted" in plan, plan
        assert "TEMP B-TREE" not in plan, plan


def test_the_desk_page_with_nothing_assigned_to_the_reviewer_reads_in_queue_order(pending, personas):
    ApprovalRequest.objects.exclude(assignees=[]).delete()
    [page] = page_reads(plans_of(lambda: approvals_queue_for(personas.bob, QueueFilters())))
    assert "USING INDEX approval_queue_order (status=?)" in page, page
    assert "TEMP B-TREE" not in page, page
