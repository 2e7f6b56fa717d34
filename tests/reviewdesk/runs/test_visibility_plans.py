"""The reviewer's lists of runs and grants test each row as they read it, on PostgreSQL's plan.

In-process, on the real PostgreSQL test database with its statistics (ANALYZE). A run is
visible to a reviewer when it is open, names them, or has an approval targeting them
(runs.selectors.runs_visible_to); that last test is an EXISTS under an OR. Written plainly,
PostgreSQL turns it into a hashed subplan, which reads every approval naming the reviewer
before the first run is returned: at 100,000 runs (`make bench` #9) the runs page read all
100,000 approvals, 27 ms of its 28, and the grants page, an IN over every run the reviewer may
see, took 113 ms. Here a few thousand runs are enough for the planner to choose it, and the
checks are on the plans (SQLite runs an EXISTS row by row already). The lists' contents are
checked by tests/reviewdesk/runs/test_visibility.py.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from reviewdesk.approvals.grants.access import grants_visible_to
from reviewdesk.approvals.models import ApprovalRequest, Decision, Grant
from reviewdesk.runs.access import runs_visible_to
from reviewdesk.runs.models import Run, RunStatus
from tests.reviewdesk.query_capture import statements_reading

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's planner and statistics"),
]

RUNS = 3000
GRANTS = RUNS  # bob's, one on each approval: alice sees those on runs she may see


@pytest.fixture
def history(interrupted_run, personas):
    """RUNS finished runs: most open to any reviewer, every fourth naming bob, each with one
    decided approval, every tenth's routed to alice; GRANTS grants by bob; then ANALYZE, as
    autovacuum would."""
    _, approval = interrupted_run()
    runs = Run.objects.bulk_create(
        Run(
            agent="demo",
            input="history",
            model={"provider": "scripted", "script": []},
            reviewers=["bob"] if i % 4 == 0 else [],
            approval_ttl_seconds=600,
            submitted_by=personas.carol,
            status=RunStatus.SUCCEEDED,
        )
        for i in range(RUNS)
    )
    approvals = ApprovalRequest.objects.bulk_create(
        ApprovalRequest(
            run=run,
            checkpoint_id=approval.checkpoint_id,
            tool_call_id=f"history-{i}",
            tool=approval.tool,
            arguments=approval.arguments,
            arguments_sha256=approval.arguments_sha256,
            assignees=["alice"] if i % 10 == 0 else [],
            status="approved",
            expires_at=approval.expires_at,
        )
        for i, run in enumerate(runs)
    )
    _grants_by_bob(approvals[:GRANTS], personas.bob)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return runs


def _grants_by_bob(approvals: list[ApprovalRequest], bob) -> None:
    """A run-scoped grant by bob on each approval, with the decision it came with (unsigned:
    the plans read no signature)."""
    now = timezone.now()
    decisions = Decision.objects.bulk_create(
        Decision(
            request=approval,
            verdict="approve",
            reviewer=bob,
            arguments=approval.arguments,
            arguments_sha256=approval.arguments_sha256,
            decided_at=now,
            not_after=now + timedelta(hours=1),
            nonce=f"history-{approval.tool_call_id}",
            payload={},
            signature="",
            key_id="history",
        )
        for approval in approvals
    )
    Grant.objects.bulk_create(
        Grant(
            approval=approval,
            decision=decision,
            tool=approval.tool,
            agent="demo",
            scope="run",
            run_id=approval.run_id,
            arguments_sha256=approval.arguments_sha256,
            max_uses=1,
            expires_at=now + timedelta(days=1),
            granted_by=bob,
            created_at=now,
            payload={},
            signature="",
            key_id="history",
        )
        for approval, decision in zip(approvals, decisions, strict=True)
    )


def plans_of(action: Callable[[], object], table: str) -> list[str]:
    """The plan of each query `action` makes that reads from `table`."""
    plans = []
    with connection.cursor() as cursor:
        for sql, params in statements_reading(action, table):
            cursor.execute("EXPLAIN " + sql, params)
            plans.append("\n".join(row[0] for row in cursor.fetchall()))
    return plans


def probes_per_row(plan: str) -> bool:
    """The visibility's EXISTS is a subplan run per row (an index probe), not hashed first."""
    return "SubPlan" in plan and "hashed SubPlan" not in plan


def test_the_runs_page_and_the_runs_api_test_each_run_as_they_read_it(history, personas, api_as):
    client = Client()
    client.force_login(personas.alice)
    visible = runs_visible_to(personas.alice).count()

    def page():
        response = client.get("/runs/")
        assert response.status_code == 200
        shown = response.context["page"]
        assert shown["total_capped"] and len(shown["rows"]) == 50
        # Never another reviewer's run, unless an approval of it was routed to alice.
        routed = set(ApprovalRequest.objects.filter(assignees=["alice"]).values_list("run_id", flat=True))
        assert all(run.reviewers == [] or run.id in routed for run in shown["rows"])
        assert visible == RUNS * 3 // 4 + RUNS // 20 + 1  # open, routed to her, the fixture's

    page_plans = plans_of(page, "runs_run")
    assert len(page_plans) == 2, page_plans  # the capped count and the page
    assert all(probes_per_row(plan) for plan in page_plans), page_plans

    def api():
        response = api_as(personas.alice, "review").get("/api/v1/runs")
        assert response.status_code == 200 and len(response.json()["results"]) > 0

    api_plans = plans_of(api, "runs_run")
    assert api_plans and all(probes_per_row(plan) for plan in api_plans), api_plans


def test_the_grants_list_checks_each_grants_run_not_every_run_the_reviewer_may_see(history, personas):
    shown: list = []
    plans = plans_of(lambda: shown.extend(grants_visible_to(personas.alice)[:50]), "approvals_grant")
    # bob's grants on runs open to alice, or on runs whose approval was routed to her
    assert len(shown) == 50
    assert all(grant.run.reviewers == [] or grant.approval.assignees == ["alice"] for grant in shown)
    assert len(plans) == 1
    (plan,) = plans
    # Each grant's run is probed by its key, its visibility tested on that row: neither every
    # run the reviewer may see (an IN over them), nor every grant's run hashed first.
    assert probes_per_row(plan), plan
