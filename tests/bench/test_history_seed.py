"""Figure #9's history (bench/history.py) at a small size: the seeded runs are the rows a real
cycle leaves, readable through the models, the audit chain stays intact, and a reviewer sees
exactly the seeded runs the visibility rules give them, page and list alike."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from agents.state import AgentState
from bench.history_seed import seed_history
from reviewdesk.accounts.roles import REVIEWERS
from reviewdesk.accounts.targets import targets_of
from reviewdesk.approvals.models import ApprovalRequest, ApprovalStatus, Decision
from reviewdesk.audit.services import audit_record
from reviewdesk.audit.verification import audit_check
from reviewdesk.runs.access import runs_visible_to
from reviewdesk.runs.models import ENDED, Checkpoint, Run, RunStatus, SideEffect
from tests.conftest import make_user

pytestmark = [pytest.mark.bench, pytest.mark.django_db]

COUNT = 50


@pytest.fixture
def seeded(personas):
    make_user("dave", REVIEWERS, "finance")
    return seed_history(COUNT, SimpleNamespace(carol=personas.carol), batch=20)


def test_the_history_is_finished_runs_with_the_rows_a_cycle_leaves(seeded, personas):
    assert seeded["runs"] == COUNT
    runs = list(Run.objects.prefetch_related("messages", "checkpoints", "attempts", "approvals__decisions"))
    assert len(runs) == COUNT and {r.status for r in runs} <= set(ENDED)
    assert len({r.submitted_by_id for r in runs}) >= 3 and len({r.agent for r in runs}) >= 2
    for run in runs:
        assert [m.position for m in run.messages.all()] == [0, 1, 2, 3]
        assert run.messages.all()[1].body["tool_calls"][0]["function"]["name"] == "send_email"
        assert run.created_at < run.updated_at
        waiting, done = run.checkpoints.all()
        assert (waiting.message_count, done.message_count) == (2, 4)
        assert AgentState.from_snapshot(done.snapshot).output == "Emailed Ada."
        assert {a.run_id for a in run.attempts.all()} == {run.id} and len(run.attempts.all()) == 2
        (approval,) = run.approvals.all()
        assert approval.checkpoint_id == waiting.id and approval.attempt.run_id == run.id
        decisions = approval.decisions.all()
        if run.status == RunStatus.CANCELLED:
            assert approval.status == ApprovalStatus.CANCELLED and not decisions
        else:
            assert approval.status == ApprovalStatus.APPROVED and len(decisions) == 1
            effect = SideEffect.objects.get(run=run)
            assert effect.decision == decisions[0] and effect.attempt.run_id == run.id
    assert Checkpoint.objects.count() == 2 * COUNT
    assert Decision.objects.count() == SideEffect.objects.count() == seeded["rows"]["decisions"]
    assert seeded["rows"]["audit"] == 4 * COUNT and seeded["rows"]["events"] == 4 * COUNT


def test_the_audit_chain_stays_intact_through_the_seeding_and_after(seeded, personas):
    assert audit_check().intact
    audit_record(actor=personas.alice, action="bench.after", subject_type="run", subject_id="x")
    seed_history(5, SimpleNamespace(carol=personas.carol))  # continues after a live row
    report = audit_check()
    assert report.intact, report


def test_each_reviewer_sees_exactly_the_seeded_runs_the_rules_give_them(seeded, personas):
    """Expected from the rows themselves: open to all, naming the reviewer, or with an approval
    whose assignees (routed, handed over, escalated) name them or their group."""
    dave = get_user_model().objects.get(username="dave")
    erin = make_user("erin", REVIEWERS)
    approvals = list(ApprovalRequest.objects.values_list("run_id", "assignees"))
    for user in (personas.alice, personas.bob, dave, erin):
        targets = targets_of(user)
        expected = {
            r.id
            for r in Run.objects.all()
            if r.reviewers == [] or user.username in r.reviewers or r.submitted_by_id == user.pk
        } | {run_id for run_id, names in approvals if targets & set(names)}
        assert set(runs_visible_to(user).values_list("id", flat=True)) == expected, user
        assert COUNT // 2 < len(expected) < COUNT, (user, len(expected))  # the rules matter here
    # A run a rule routed to bob, on a run naming alice: bob opens it; erin does not.
    routed = Run.objects.filter(reviewers=["alice"], approvals__assignees=["bob"]).first()
    for user, status in ((personas.bob, 200), (personas.alice, 200), (erin, 404), (dave, 404)):
        client = Client()
        client.force_login(user)
        assert client.get(f"/runs/{routed.id}/").status_code == status, user
