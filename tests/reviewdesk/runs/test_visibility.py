"""Who may open a run (runs.selectors): the one run by its pk, and the list, alike.

A reviewer sees runs open to any reviewer, runs naming them, and runs with an approval
routed, handed over or escalated to them (or their group); never another reviewer's
assigned run. Each case is checked on the service, the run page, the run API and the list.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client

from reviewdesk.accounts.roles import REVIEWERS
from reviewdesk.approvals.lifecycle.clock import approvals_escalate
from reviewdesk.approvals.lifecycle.handover import approval_handover
from reviewdesk.approvals.models import ApprovalRequest, ApprovalStatus
from reviewdesk.lib.errors import NotFound
from reviewdesk.runs.access import run_get_visible, runs_visible_to
from tests.conftest import make_user

pytestmark = pytest.mark.django_db


def sees(user, run, api_as) -> bool:
    """Whether `user` may open `run`, asked four ways that must agree."""
    try:
        got = run_get_visible(run_id=run.id, user=user)
        assert got == run  # that run, never another the user may see
        service = True
    except NotFound:
        service = False
    client = Client()
    client.force_login(user)
    page = client.get(f"/runs/{run.id}/").status_code
    api = api_as(user, "review").get(f"/api/v1/runs/{run.id}").status_code
    listed = runs_visible_to(user).filter(pk=run.pk).exists()
    assert (page, api, listed) == ((200, 200, True) if service else (404, 404, False)), user
    return service


@pytest.fixture
def erin(db):
    return make_user("erin", REVIEWERS)


def test_a_reviewer_sees_runs_open_to_all_and_naming_them_never_another_reviewers(
    interrupted_run, personas, api_as, erin
):
    open_run, _ = interrupted_run()
    alices, _ = interrupted_run(reviewers=["alice"])
    for user in (personas.alice, personas.bob, erin, personas.admin, personas.carol):
        assert sees(user, open_run, api_as), user
    assert [sees(u, alices, api_as) for u in (personas.alice, personas.bob, erin)] == [True, False, False]
    assert sees(personas.admin, alices, api_as) and sees(personas.carol, alices, api_as)  # admin, submitter
    assert not sees(personas.olivia, open_run, api_as)  # neither reviewer nor submitter


def test_a_hand_over_opens_the_run_to_the_new_reviewer_only(interrupted_run, personas, api_as, erin):
    run, approval = interrupted_run(reviewers=["alice"])
    interrupted_run(reviewers=["alice"])  # another of alice's runs: the pk picks the right one
    assert not sees(personas.bob, run, api_as)

    approval_handover(approval_id=approval.id, by=personas.alice, to="bob", note="yours")

    assert sees(personas.bob, run, api_as)
    assert sees(personas.alice, run, api_as)  # the run still names her
    assert not sees(erin, run, api_as)


def test_an_escalation_opens_the_run_to_the_reviewers_who_join(
    interrupted_run, personas, api_as, erin, settings
):
    settings.DESK_RESPONSE_TARGETS = {"demo.send_email": 60}
    settings.DESK_ESCALATION_CHAINS = {"demo.send_email": ["bob"]}
    run, approval = interrupted_run(reviewers=["alice"])
    assert not sees(personas.bob, run, api_as)

    assert approvals_escalate(now=approval.respond_by + timedelta(seconds=1)) == 1

    assert sees(personas.bob, run, api_as)
    assert not sees(erin, run, api_as)


def test_a_routed_approval_opens_the_run_whatever_its_other_approvals_say(interrupted_run, personas, api_as):
    """One approval of the run is routed to finance; another, answered, was open to everyone:
    finance's reviewer still sees the run, and the open one opens it to no one else."""
    dave = make_user("dave", REVIEWERS, "finance")
    run, approval = interrupted_run(reviewers=["alice"])
    ApprovalRequest.objects.filter(pk=approval.pk).update(assignees=["group:finance"])
    other = ApprovalRequest.objects.get(pk=approval.pk)
    other.pk, other.tool_call_id, other.assignees, other.status = None, "call_9", [], ApprovalStatus.CANCELLED
    other.save()

    assert sees(dave, run, api_as)
    assert not sees(personas.bob, run, api_as)


def test_names_match_exactly_and_only_for_reviewers(interrupted_run, personas, api_as):
    """A name that contains the user's, a group they are not in, or a non-reviewer named on
    the approval: none of them opens the run."""
    make_user("alicia", REVIEWERS)
    run, approval = interrupted_run(reviewers=["alicia"])
    ApprovalRequest.objects.filter(pk=approval.pk).update(assignees=["alicia", "group:finance", "olivia"])
    assert not sees(personas.alice, run, api_as)
    assert not sees(personas.olivia, run, api_as)


def test_exists_per_row_on_a_subquery_with_its_own_offset_is_valid_sql(interrupted_run):
    """ExistsPerRow fences its subquery with OFFSET 0 on PostgreSQL; one sliced with an offset
    of its own keeps that one (two OFFSETs are a syntax error), on both databases."""
    from django.db.models import OuterRef

    from reviewdesk.lib.db import ExistsPerRow
    from reviewdesk.runs.models import Run

    run, _ = interrupted_run()
    approvals = ApprovalRequest.objects.filter(run=OuterRef("pk")).order_by("created_at")
    assert list(Run.objects.filter(ExistsPerRow(approvals))) == [run]
    assert list(Run.objects.filter(ExistsPerRow(approvals[1:]))) == []  # it has one approval
