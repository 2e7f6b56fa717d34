"""The desk's workers never execute an external run: the sweeper, the claim and the tasks leave
it alone whatever its status says; a cancel cancels its calls and sends no task; a retry or a
follow-up is its framework's."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from reviewdesk.approvals.models import ApprovalRequest
from reviewdesk.runs.claim import run_claim
from reviewdesk.runs.execution import run_execute
from reviewdesk.runs.models import Attempt, Run
from reviewdesk.runs.sweeper import runs_sweep

pytestmark = pytest.mark.django_db


def test_the_sweeper_and_the_claim_leave_a_running_external_run_without_a_lease_alone(
    submitted, decide_api, task_queue
):
    data, approval_id = submitted()
    decide_api(approval_id)
    run = Run.objects.get(pk=data["run"]["id"])
    assert run.status == "running" and run.lease_expires_at is None
    long_ago = timezone.now() - timedelta(hours=2)
    Run.objects.filter(pk=run.pk).update(updated_at=long_ago)
    assert runs_sweep()["requeued"] == 0
    assert task_queue.length() == 0
    assert run_claim(run_id=run.pk, worker="w") is None
    assert run_execute(run_id=run.pk, worker="w") is None
    run.refresh_from_db()
    assert (run.status, run.lease_epoch) == ("running", 0)
    assert not Attempt.objects.filter(run=run).exists()


def test_even_a_queued_or_expired_lease_external_run_is_never_claimed(submitted, task_queue):
    """Belt and braces: an external run whose row says queued, or running under an expired lease
    (a bug or a hand edit), is still not a worker's."""
    data, _ = submitted()
    run_id = data["run"]["id"]
    past = timezone.now() - timedelta(hours=1)
    Run.objects.filter(pk=run_id).update(status="queued", updated_at=past)
    assert runs_sweep()["requeued"] == 0
    assert run_claim(run_id=run_id, worker="w") is None
    Run.objects.filter(pk=run_id).update(status="running", lease_expires_at=past)
    assert runs_sweep()["requeued"] == 0
    assert run_claim(run_id=run_id, worker="w") is None
    assert task_queue.length() == 0


def test_cancelling_an_external_run_cancels_its_calls_and_sends_no_task(
    submitted, api_as, personas, decide_api, task_queue, django_capture_on_commit_callbacks
):
    data, approval_id = submitted()
    with django_capture_on_commit_callbacks(execute=True):
        response = api_as(personas.carol, "submit").post(f"/api/v1/runs/{data['run']['id']}/cancel")
    assert response.status_code == 200, response.json()
    assert response.json()["status"] == "cancelled" and response.json()["kind"] == "external"
    assert ApprovalRequest.objects.get(pk=approval_id).status == "cancelled"
    assert task_queue.length() == 0
    late = decide_api(approval_id)
    assert late.status_code == 409 and late.json()["code"] == "cancelled"


def test_a_retry_or_a_follow_up_of_an_external_run_is_409_external(submitted, api_as, personas):
    data, _ = submitted()
    carol = api_as(personas.carol, "submit")
    run_id = data["run"]["id"]
    carol.post(f"/api/v1/runs/{run_id}/cancel")
    retry = carol.post(f"/api/v1/runs/{run_id}/retry", {}, format="json")
    assert retry.status_code == 409 and retry.json()["code"] == "external"
    Run.objects.filter(pk=run_id).update(status="succeeded")
    follow_up = carol.post(f"/api/v1/runs/{run_id}/messages", {"input": "and now?"}, format="json")
    assert follow_up.status_code == 409 and follow_up.json()["code"] == "external"


def test_the_run_reads_as_external_in_the_runs_api(submitted, api_as, personas):
    data, _ = submitted()
    run = api_as(personas.carol, "submit").get(f"/api/v1/runs/{data['run']['id']}").json()
    assert (run["kind"], run["framework"], run["external_id"], run["model"]) == (
        "external",
        "openai-agents",
        "oa:thread-42",
        None,
    )
    assert run["context"]["messages"][0]["role"] == "user"
    assert run["checkpoint_id"] == data["checkpoint_id"]
    assert run["approvals"][0]["external"]["preview"].startswith("Refund 250")


def test_a_group_the_submit_names_reviews_the_run_and_others_do_not(submitted, api_as, personas):
    from django.contrib.auth.models import Group

    from tests.reviewdesk.external.conftest import submit_body

    personas.bob.groups.add(Group.objects.create(name="finance"))
    data, _ = submitted(submit_body(reviewers=["group:finance"]))
    run_id = data["run"]["id"]
    assert api_as(personas.alice, "review").post(f"/api/v1/runs/{run_id}/cancel").status_code in (403, 404)
    assert api_as(personas.bob, "review").post(f"/api/v1/runs/{run_id}/cancel").status_code == 200
