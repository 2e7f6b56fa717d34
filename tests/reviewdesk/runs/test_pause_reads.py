"""What the host reads around a pause (`make bench` #4): the run's submitter, whom the approval's
event names, comes with the claim's read of the run, not from a query of its own; a resume's
load brings the live messages its checkpoint covers, with the checkpoint, and none set aside."""

from __future__ import annotations

import pytest

from reviewdesk.events.models import DeskEvent
from reviewdesk.runs.execution import run_execute
from reviewdesk.runs.host import DatabaseHost
from reviewdesk.runs.models import Message, RunStatus
from reviewdesk.runs.services import run_submit
from tests.reviewdesk.runs.test_statement_budget import SCRIPT, tallied

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_task_raising_an_approval_reads_the_submitter_once(personas):
    run = run_submit(
        submitter=personas.carol,
        agent="demo",
        input="Tell Ada.",
        model={"provider": "scripted", "script": SCRIPT},
    )
    with tallied() as seen:
        run_execute(run_id=run.id, worker="reads")
    run.refresh_from_db()
    assert run.status == RunStatus.INPUT_REQUIRED, run.error

    # Once, when the approval first names them: the claim (one UPDATE of the run) reads no
    # user, so a resume that raises nothing reads none either.
    users = [sql for sql in seen.statements if 'FROM "auth_user"' in sql]
    assert len(users) == 1, users
    event = DeskEvent.objects.get(type="approval.created")
    assert event.data["submitted_by"] == "carol" and event.data["quorum"]["approved_by"] == []


def test_a_load_after_a_retry_from_an_earlier_checkpoint_leaves_the_set_aside_turn_out(
    interrupted_run, personas, api_as
):
    run, _ = interrupted_run()
    first = run.checkpoints.order_by("number").first()
    submitter = api_as(personas.carol, "submit")
    submitter.post(f"/api/v1/runs/{run.id}/cancel", {}, format="json")
    retried = submitter.post(f"/api/v1/runs/{run.id}/retry", {"checkpoint_id": str(first.id)}, format="json")
    assert retried.status_code == 201, retried.json()
    run_execute(run_id=run.id)  # the new branch's model turn takes the set-aside turn's position
    run.refresh_from_db()
    assert run.status == RunStatus.INPUT_REQUIRED, run.error

    host = DatabaseHost(run=run, attempt=run.attempts.order_by("-number").first())
    state = host.load()
    live = list(
        Message.objects.filter(run=run, superseded_at__isnull=True)
        .order_by("position")
        .values_list("body", flat=True)
    )
    set_aside = Message.objects.get(run=run, superseded_at__isnull=False).body
    assert state.message_count == len(live) == 3
    assert host.messages(state.message_count) == live and set_aside not in live
