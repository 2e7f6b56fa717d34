"""POST /api/v1/runs/{id}/cancel and /retry: they mean what they say."""

from __future__ import annotations

import pytest

from reviewdesk.approvals.models import ApprovalRequest
from reviewdesk.events.models import DeskEvent
from reviewdesk.runs.execution import run_execute
from reviewdesk.runs.models import Message, Run, RunStatus

pytestmark = pytest.mark.django_db


def post(client, path, body=None, **headers):
    return client.post(path, body or {}, format="json", **headers)


def test_cancel_ends_the_run_and_its_pending_approvals_vanish_from_the_desk(
    interrupted_run, personas, api_as
):
    run, approval = interrupted_run()
    seq = DeskEvent.objects.order_by("-id").first().id
    response = post(api_as(personas.carol, "submit"), f"/api/v1/runs/{run.id}/cancel")
    assert response.status_code == 200, response.json()
    assert response.json()["status"] == "cancelled"
    run.refresh_from_db()
    approval.refresh_from_db()
    assert (run.status, run.cancel_epoch, approval.status) == (RunStatus.CANCELLED, 1, "cancelled")
    pushed = [(e.type, e.data.get("status")) for e in DeskEvent.objects.filter(id__gt=seq)]
    assert ("approval.updated", "cancelled") in pushed and ("run.updated", "cancelled") in pushed


def test_a_decision_after_cancel_is_409(interrupted_run, personas, api_as):
    run, approval = interrupted_run()
    post(api_as(personas.carol, "submit"), f"/api/v1/runs/{run.id}/cancel")
    response = post(
        api_as(personas.alice, "review"),
        f"/api/v1/approvals/{approval.id}/decision",
        {"verdict": "approve", "checkpoint_id": str(approval.checkpoint_id)},
    )
    assert response.status_code == 409
    assert response.json()["code"] == "cancelled"


def test_cancelling_twice_is_409_but_a_repeated_key_replays(interrupted_run, personas, api_as):
    run, _ = interrupted_run()
    carol = api_as(personas.carol, "submit")
    first = post(carol, f"/api/v1/runs/{run.id}/cancel", HTTP_IDEMPOTENCY_KEY="c1")
    replay = post(carol, f"/api/v1/runs/{run.id}/cancel", HTTP_IDEMPOTENCY_KEY="c1")
    assert first.status_code == replay.status_code == 200
    assert replay["Idempotent-Replayed"] == "true"
    again = post(carol, f"/api/v1/runs/{run.id}/cancel")
    assert again.status_code == 409 and again.json()["code"] == "ended"


def test_a_conflict_under_a_key_is_not_replayed_once_the_state_allows_the_request(
    interrupted_run, personas, api_as
):
    """A 409 changed nothing: the same key asks again and is answered from the run's state
    now, not with the stale refusal; the success that follows is the one replayed."""
    run, _ = interrupted_run()
    carol = api_as(personas.carol, "submit")
    early = post(carol, f"/api/v1/runs/{run.id}/retry", HTTP_IDEMPOTENCY_KEY="retry-when-ended")
    assert early.status_code == 409 and early.json()["code"] == "not_ended"
    assert post(carol, f"/api/v1/runs/{run.id}/cancel").status_code == 200
    retried = post(carol, f"/api/v1/runs/{run.id}/retry", HTTP_IDEMPOTENCY_KEY="retry-when-ended")
    assert retried.status_code == 201, retried.json()
    replay = post(carol, f"/api/v1/runs/{run.id}/retry", HTTP_IDEMPOTENCY_KEY="retry-when-ended")
    assert replay.status_code == 201 and replay["Idempotent-Replayed"] == "true"
    run.refresh_from_db()
    assert replay.json()["revision"] == retried.json()["revision"] == run.revision  # retried once


def test_who_may_cancel(interrupted_run, personas, api_as):
    run, _ = interrupted_run(reviewers=["bob"])
    assert post(api_as(personas.olivia, "submit"), f"/api/v1/runs/{run.id}/cancel").status_code == 404
    assert post(api_as(personas.alice, "review"), f"/api/v1/runs/{run.id}/cancel").status_code == 404
    assert post(api_as(personas.bob, "review"), f"/api/v1/runs/{run.id}/cancel").status_code == 200


def test_a_token_cancels_only_in_the_role_its_scopes_give(interrupted_run, personas, api_as):
    """bob reviews the run: his submit-only token may not cancel it; carol submitted it: her
    review-only token may not; each with the right scope may (the page's session may too)."""
    run, _ = interrupted_run(reviewers=["bob"])
    bob_submit = post(api_as(personas.bob, "submit"), f"/api/v1/runs/{run.id}/cancel")
    carol_review = post(api_as(personas.carol, "review"), f"/api/v1/runs/{run.id}/cancel")
    assert (bob_submit.status_code, carol_review.status_code) == (403, 403)
    assert bob_submit.json()["code"] == carol_review.json()["code"] == "forbidden"
    assert post(api_as(personas.carol, "submit"), f"/api/v1/runs/{run.id}/cancel").status_code == 200


def test_retry_of_a_cancelled_run_raises_fresh_approvals_and_finishes(
    interrupted_run, personas, api_as, mailoutbox
):
    run, old = interrupted_run()
    carol = api_as(personas.carol, "submit")
    post(carol, f"/api/v1/runs/{run.id}/cancel")
    response = post(carol, f"/api/v1/runs/{run.id}/retry", HTTP_IDEMPOTENCY_KEY="r1")
    assert response.status_code == 201, response.json()
    assert response.json()["status"] == "queued"
    fresh = ApprovalRequest.objects.get(run=run, status="pending")
    assert fresh.tool_call_id == old.tool_call_id and fresh.pk != old.pk
    run_execute(run_id=run.id)
    run.refresh_from_db()
    assert run.status == RunStatus.INPUT_REQUIRED
    decided = post(
        api_as(personas.alice, "review"),
        f"/api/v1/approvals/{fresh.id}/decision",
        {"verdict": "approve", "checkpoint_id": str(fresh.checkpoint_id)},
    )
    assert decided.status_code == 201
    run_execute(run_id=run.id)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert len(mailoutbox) == 1
    assert [a.status for a in run.attempts.all()] == ["released", "released", "released"]


def test_retry_from_an_earlier_checkpoint_sets_later_messages_aside_and_branches_call_ids(
    interrupted_run, personas, api_as
):
    run, _ = interrupted_run()
    first = run.checkpoints.order_by("number").first()
    post(api_as(personas.carol, "submit"), f"/api/v1/runs/{run.id}/cancel")
    response = post(
        api_as(personas.carol, "submit"), f"/api/v1/runs/{run.id}/retry", {"checkpoint_id": str(first.id)}
    )
    assert response.status_code == 201, response.json()
    assert (
        Message.objects.filter(run=run, superseded_at__isnull=False).count() == 1
    )  # the old model turn, kept
    run_execute(run_id=run.id)
    run.refresh_from_db()
    assert run.branch == 1
    live = ApprovalRequest.objects.get(run=run, status="pending")
    assert live.tool_call_id.startswith("call_b1_")  # never collides with the abandoned branch's ledger keys
    assert len(response.json()["messages"]) == 2


@pytest.mark.parametrize("status", [RunStatus.SUCCEEDED, RunStatus.INPUT_REQUIRED])
def test_only_failed_or_cancelled_runs_can_be_retried(interrupted_run, personas, api_as, status):
    run, _ = interrupted_run()
    Run.objects.filter(pk=run.pk).update(status=status)
    response = post(api_as(personas.carol, "submit"), f"/api/v1/runs/{run.id}/retry")
    assert response.status_code == 409


def test_a_reviewer_cannot_retry_someone_elses_run(interrupted_run, personas, api_as):
    run, _ = interrupted_run()
    post(api_as(personas.carol, "submit"), f"/api/v1/runs/{run.id}/cancel")
    assert post(api_as(personas.alice, "submit"), f"/api/v1/runs/{run.id}/retry").status_code == 403


def test_retry_from_a_checkpoint_of_another_run_is_404(interrupted_run, personas, api_as):
    run, _ = interrupted_run()
    other, _ = interrupted_run()
    post(api_as(personas.carol, "submit"), f"/api/v1/runs/{run.id}/cancel")
    response = post(
        api_as(personas.carol, "submit"),
        f"/api/v1/runs/{run.id}/retry",
        {"checkpoint_id": str(other.checkpoints.first().id)},
    )
    assert response.status_code == 404


def test_unknown_api_paths_answer_in_problem_json(personas, api_as):
    response = api_as(personas.carol, "submit").get("/api/v1/runs/not-a-uuid")
    assert response.status_code == 404
    assert response["Content-Type"] == "application/problem+json"


def test_retry_after_a_refused_decision_asks_for_a_new_one(interrupted_run, personas, api_as):
    """Found in review: the refused decision was reused on every retry, failing forever."""
    from reviewdesk.approvals.deciding.record import approval_decide

    run, approval = interrupted_run()
    approval_decide(
        approval_id=approval.id,
        reviewer=personas.alice,
        verdict="approve",
        checkpoint_id=str(approval.checkpoint_id),
    )
    personas.alice.groups.clear()  # the gate will refuse alice's decision
    run_execute(run_id=run.id)
    run.refresh_from_db()
    assert (run.status, run.error_kind) == (RunStatus.FAILED, "approval")
    assert post(api_as(personas.carol, "submit"), f"/api/v1/runs/{run.id}/retry").status_code == 201
    fresh = ApprovalRequest.objects.get(run=run, status="pending")
    assert fresh.pk != approval.pk


def test_retry_from_a_checkpoint_on_an_abandoned_line_of_history_is_409(interrupted_run, personas, api_as):
    """Found in review: it mixed the new branch's messages with the old branch's batch."""
    run, _ = interrupted_run()
    carol = api_as(personas.carol, "submit")
    checkpoints = list(run.checkpoints.order_by("number"))
    first, abandoned = checkpoints[0], checkpoints[-1]
    carol.post(f"/api/v1/runs/{run.id}/cancel")
    assert post(carol, f"/api/v1/runs/{run.id}/retry", {"checkpoint_id": str(first.id)}).status_code == 201
    carol.post(f"/api/v1/runs/{run.id}/cancel")
    response = post(carol, f"/api/v1/runs/{run.id}/retry", {"checkpoint_id": str(abandoned.id)})
    assert response.status_code == 409 and response.json()["code"] == "abandoned"
