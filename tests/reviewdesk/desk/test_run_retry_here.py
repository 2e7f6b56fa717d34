"""The run page's "Retry from here": one button per checkpoint of a failed or cancelled run,
for its submitter and admins; the retry service restarts from that checkpoint and audits it;
everyone else is refused. In-process, on the test database."""

from __future__ import annotations

import re

from django.test import Client

from reviewdesk.audit.models import AuditEvent
from reviewdesk.runs.models import Run, RunStatus
from reviewdesk.runs.services import run_cancel

RETRY_HERE = re.compile(r'name="checkpoint_id" value="([0-9a-f-]+)"><button type="submit" class="retry-here"')


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def cancelled_run(interrupted_run, personas) -> Run:
    run, _ = interrupted_run()
    run_cancel(run_id=run.id, user=personas.carol)
    return Run.objects.get(pk=run.id)


def test_the_submitter_retries_from_a_checkpoint_and_the_service_audits_it(interrupted_run, personas):
    run = cancelled_run(interrupted_run, personas)
    checkpoints = list(run.checkpoints.order_by("number").values_list("id", flat=True))
    assert checkpoints
    page = logged_in(personas.carol).get(f"/runs/{run.id}/").content.decode()
    assert RETRY_HERE.findall(page) == [str(c) for c in checkpoints]  # one button per checkpoint
    assert RETRY_HERE.findall(logged_in(personas.admin).get(f"/runs/{run.id}/").content.decode())

    first = str(checkpoints[0])
    response = logged_in(personas.carol).post(f"/runs/{run.id}/retry/", {"checkpoint_id": first})
    assert response.status_code == 302 and response["Location"] == f"/runs/{run.id}/"
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED
    retried = AuditEvent.objects.get(action="run.retried", subject_id=str(run.id))
    assert (retried.actor, retried.data["checkpoint_id"]) == (personas.carol, first)
    # Queued again: no retry is offered until it fails or is cancelled once more.
    assert not RETRY_HERE.findall(logged_in(personas.carol).get(f"/runs/{run.id}/").content.decode())


def test_others_see_no_retry_and_are_refused(interrupted_run, personas):
    run = cancelled_run(interrupted_run, personas)
    checkpoint = str(run.checkpoints.order_by("number").first().id)
    alice = logged_in(personas.alice)  # a reviewer: sees the run, may not retry it
    assert not RETRY_HERE.findall(alice.get(f"/runs/{run.id}/").content.decode())
    assert alice.post(f"/runs/{run.id}/retry/", {"checkpoint_id": checkpoint}).status_code == 403
    assert (
        logged_in(personas.olivia).post(f"/runs/{run.id}/retry/", {"checkpoint_id": checkpoint}).status_code
        == 404
    )
    anonymous = Client().post(f"/runs/{run.id}/retry/", {"checkpoint_id": checkpoint})
    assert anonymous.status_code == 302 and "/accounts/login/" in anonymous["Location"]
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    assert not AuditEvent.objects.filter(action="run.retried").exists()


def test_a_malformed_checkpoint_is_a_message_not_a_500(interrupted_run, personas):
    run = cancelled_run(interrupted_run, personas)
    carol = logged_in(personas.carol)
    response = carol.post(f"/runs/{run.id}/retry/", {"checkpoint_id": "not-a-uuid"}, follow=True)
    assert response.status_code == 200
    assert "checkpoint_id is not a checkpoint&#x27;s id" in response.content.decode()
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED


def test_an_ended_runs_page_offers_only_the_checkpoints_it_kept_and_says_which_it_keeps(
    interrupted_run, personas, settings
):
    settings.DESK_CHECKPOINTS_KEPT_AFTER_END = 1
    run, approval = interrupted_run()
    before = run.checkpoints.count()
    run_cancel(run_id=run.id, user=personas.carol)
    kept = {str(c) for c in run.checkpoints.values_list("id", flat=True)}
    assert len(kept) < before, "the cancel should have pruned something"
    page = logged_in(personas.carol).get(f"/runs/{run.id}/").content.decode()
    assert set(RETRY_HERE.findall(page)) == kept and str(approval.checkpoint_id) in kept
    assert "An ended run keeps its last 1 checkpoint and those an approval names" in page


def test_retry_from_a_pruned_checkpoint_says_so_on_the_run_page_not_no_such_run(
    interrupted_run, personas, settings
):
    """A page drawn before a prune (a second tab, `prune_checkpoints` since) still offers
    "Retry from here" on a checkpoint that is gone: the run is there, the checkpoint is not."""
    settings.DESK_CHECKPOINTS_KEPT_AFTER_END = 1
    run, _ = interrupted_run()
    before = list(run.checkpoints.order_by("number").values_list("id", flat=True))
    run_cancel(run_id=run.id, user=personas.carol)
    pruned = [c for c in before if not run.checkpoints.filter(pk=c).exists()]
    assert pruned, "the run should have a checkpoint to prune"

    carol = logged_in(personas.carol)
    response = carol.post(f"/runs/{run.id}/retry/", {"checkpoint_id": str(pruned[0])}, follow=True)
    assert response.status_code == 200, response.status_code
    assert "no such checkpoint in this run" in response.content.decode()
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
