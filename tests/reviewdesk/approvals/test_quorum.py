"""Quorum: the demo's execute needs two different reviewers, each with a signed decision."""

from __future__ import annotations

import time

import pytest

from reviewdesk.approvals.models import ApprovalRequest, ApprovalStatus, Decision
from reviewdesk.approvals.reads.representation import approval_data
from reviewdesk.audit.models import AuditEvent
from reviewdesk.events.models import DeskEvent
from reviewdesk.lib.errors import Conflict, Invalid
from reviewdesk.runs.execution import run_execute
from reviewdesk.runs.models import Run, RunStatus, SideEffect
from tests.reviewdesk.approvals.conftest import EXECUTE_SCRIPT
from tests.reviewdesk.conftest import decide

pytestmark = pytest.mark.django_db


def advance(run):
    run_execute(run_id=run.id, worker="in-process")
    run.refresh_from_db()
    return run


def test_one_approval_of_two_leaves_the_call_pending_and_nothing_runs(interrupted_run, personas):
    run, approval = interrupted_run(script=EXECUTE_SCRIPT)
    assert approval.required_approvals == 2
    decide(approval, personas.alice)
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING
    assert approval_data(approval)["quorum"] == {"required": 2, "approved_by": ["alice"], "groups": []}
    pushed = DeskEvent.objects.filter(type="approval.updated").latest("id")
    assert pushed.data["quorum"]["approved_by"] == ["alice"] and pushed.data["status"] == "pending"
    run = advance(run)
    assert run.status == RunStatus.INPUT_REQUIRED
    assert not SideEffect.objects.filter(run=run).exists()


def test_the_second_reviewers_approval_runs_the_call_once_with_both_decisions_consumed(
    interrupted_run, personas
):
    run, approval = interrupted_run(script=EXECUTE_SCRIPT)
    first = decide(approval, personas.alice)
    second = decide(approval, personas.bob)
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.APPROVED
    assert approval.decision == second
    run = advance(run)
    assert run.status == RunStatus.SUCCEEDED, run.error
    effect = SideEffect.objects.get(run=run)
    assert effect.result["stdout"] == "two-person\n"
    assert effect.decision_id == second.id
    assert all(d.consumed_at for d in Decision.objects.filter(pk__in=[first.pk, second.pk]))
    votes = AuditEvent.objects.filter(action="decision.approve", subject_id=str(approval.id)).order_by("id")
    assert [(e.data["approvals"], e.data["required_approvals"]) for e in votes] == [(1, 2), (2, 2)]


def test_a_first_voter_who_left_the_reviewers_no_longer_counts_and_nothing_runs(interrupted_run, personas):
    """Each vote's reviewer is checked when the call runs, not only the one that completed it."""
    run, approval = interrupted_run(script=EXECUTE_SCRIPT)
    first = decide(approval, personas.alice)
    decide(approval, personas.bob)
    personas.alice.groups.clear()
    run = advance(run)
    assert (run.status, run.error_kind) == (RunStatus.FAILED, "approval")
    assert "no longer allowed" in run.error
    assert not SideEffect.objects.filter(run=run).exists()
    assert Decision.objects.get(pk=first.pk).consumed_at is None


def test_a_first_vote_older_than_the_decision_validity_still_counts_when_the_quorum_completes(
    interrupted_run, personas, settings
):
    # Stand-in for the defaults: decisions valid 24 h, a request waiting up to 30 days.
    settings.DESK_DECISION_VALID_SECONDS = 1
    run, approval = interrupted_run(script=EXECUTE_SCRIPT, approval_ttl_seconds=3600)
    first = decide(approval, personas.alice)
    assert first.not_after >= approval.expires_at  # a vote waits as long as its request may
    time.sleep(1.1)  # past the first vote's own validity period

    decide(approval, personas.bob)
    run = advance(run)

    assert run.status == RunStatus.SUCCEEDED, run.error
    assert SideEffect.objects.get(run=run).result["stdout"] == "two-person\n"


def test_a_single_decision_keeps_the_plain_validity(interrupted_run, personas, settings):
    settings.DESK_DECISION_VALID_SECONDS = 60
    _, approval = interrupted_run(approval_ttl_seconds=3600)
    decision = decide(approval, personas.alice)
    assert (decision.not_after - decision.decided_at).total_seconds() == 60


def test_the_same_reviewer_voting_twice_is_409_and_counts_once(interrupted_run, personas, api_as):
    _, approval = interrupted_run(script=EXECUTE_SCRIPT)
    decide(approval, personas.alice)
    response = api_as(personas.alice, "review").post(
        f"/api/v1/approvals/{approval.id}/decision",
        {"verdict": "approve", "checkpoint_id": str(approval.checkpoint_id)},
        format="json",
    )
    assert response.status_code == 409
    assert response.json()["code"] == "voted"
    assert approval.decisions.count() == 1
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING


def test_a_rejection_after_one_approval_rejects_the_call(interrupted_run, personas):
    run, approval = interrupted_run(script=EXECUTE_SCRIPT)
    decide(approval, personas.alice)
    decide(approval, personas.bob, verdict="reject", reason="not on my watch")
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.REJECTED
    run = advance(run)
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert not SideEffect.objects.filter(run=run).exists()
    tool_result = run.messages.filter(body__role="tool").get().body["content"]
    assert "not on my watch" in tool_result


def test_an_edit_is_refused_under_a_quorum(interrupted_run, personas):
    _, approval = interrupted_run(script=EXECUTE_SCRIPT)
    with pytest.raises(Invalid, match="cannot be edited"):
        decide(approval, personas.alice, verdict="edit", arguments={"command": "echo other"})
    assert approval.decisions.count() == 0


def test_the_gate_counts_from_the_tool_not_from_the_row(interrupted_run, personas):
    """Someone lowers the request's quorum in the database and marks it approved after one
    vote: the gate still wants two reviewers' signatures, and nothing runs."""
    run, approval = interrupted_run(script=EXECUTE_SCRIPT)
    decide(approval, personas.alice)
    ApprovalRequest.objects.filter(pk=approval.pk).update(
        required_approvals=1, status=ApprovalStatus.APPROVED
    )
    Run.objects.filter(pk=run.pk).update(status=RunStatus.QUEUED)  # as the decide service would
    run = advance(run)
    assert (run.status, run.error_kind) == (RunStatus.FAILED, "approval")
    assert "needs approvals from 2 different reviewers; it has 1" in run.error
    assert not SideEffect.objects.filter(run=run).exists()


def test_a_decided_call_refuses_a_late_vote(interrupted_run, personas, api_as):
    _, approval = interrupted_run(script=EXECUTE_SCRIPT)
    decide(approval, personas.alice)
    decide(approval, personas.bob)
    with pytest.raises(Conflict, match="already approved"):
        decide(approval, personas.admin)


def test_a_quorum_with_groups_counts_only_their_members_votes(interrupted_run, personas, dave, api_as):
    """A quorum may name groups (Quorum.groups): a reviewer outside them sees the item but may
    not vote (403); members vote as usual."""
    from reviewdesk.lib.errors import Forbidden

    _, approval = interrupted_run(script=EXECUTE_SCRIPT)
    ApprovalRequest.objects.filter(pk=approval.pk).update(quorum_groups=["finance"])
    with pytest.raises(Forbidden, match="assigned to another reviewer or group"):
        decide(approval, personas.alice)
    decide(approval, dave)
    assert approval.decisions.get().reviewer == dave
