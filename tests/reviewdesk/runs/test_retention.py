"""Checkpoint retention (DESIGN.md, "Checkpoint"): every checkpoint while a run is open, its
last `DESK_CHECKPOINTS_KEPT_AFTER_END` and those an approval names once it has ended.

In-process on the real database: runs advance through `run_execute` with the scripted model."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import transaction

from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.lib.errors import NotFound
from reviewdesk.runs.execution import run_execute
from reviewdesk.runs.models import Checkpoint, Message, Run, RunStatus
from reviewdesk.runs.services import run_cancel, run_retry, run_submit
from reviewdesk.runs.threads import run_follow_up
from reviewdesk.runs.transitions import run_mark_failed

pytestmark = pytest.mark.django_db

LOOKUP = {"tool_calls": [{"name": "lookup_customer", "arguments": {"email": "ada@example.com"}}]}
EMAIL = {"to": "ada@example.com", "subject": "Your refund", "body": "It is on its way."}
SEND = {"tool_calls": [{"name": "send_email", "arguments": EMAIL}]}
# Four read-only steps, then a call a reviewer approves, then the answer.
SCRIPT = [LOOKUP, LOOKUP, LOOKUP, LOOKUP, SEND, {"content": "Emailed Ada."}]


@pytest.fixture
def kept(settings):
    settings.DESK_CHECKPOINTS_KEPT_AFTER_END = 2
    return 2


def numbers(run: Run) -> list[int]:
    return list(Checkpoint.objects.filter(run=run).order_by("number").values_list("number", flat=True))


def waiting_run(personas) -> Run:
    run = run_submit(
        submitter=personas.carol,
        agent="demo",
        input="Tell Ada.",
        model={"provider": "scripted", "script": SCRIPT},
    )
    run_execute(run_id=run.id, worker="retention")
    run.refresh_from_db()
    assert run.status == RunStatus.INPUT_REQUIRED, run.error
    return run


def approve(run: Run, reviewer) -> None:
    approval = run.approvals.get()
    approval_decide(
        approval_id=approval.id,
        reviewer=reviewer,
        verdict="approve",
        checkpoint_id=str(approval.checkpoint_id),
    )
    run_execute(run_id=run.id, worker="retention")
    run.refresh_from_db()


def test_an_open_run_keeps_every_checkpoint(personas, kept):
    run = waiting_run(personas)
    assert numbers(run) == list(range(1, len(numbers(run)) + 1)) and len(numbers(run)) > kept + 1


def test_a_finished_run_keeps_its_last_checkpoints_and_the_one_its_approval_names(personas, kept):
    run = waiting_run(personas)
    named = run.approvals.get().checkpoint.number
    messages = Message.objects.filter(run=run).count()
    approve(run, personas.alice)
    assert run.status == RunStatus.SUCCEEDED, run.error
    last = Checkpoint.objects.filter(run=run).order_by("-number").first().number
    assert named > 1, "the script should leave older checkpoints to prune"
    assert numbers(run) == sorted({named, last - 1, last})
    # The message log stays whole: one more for the tool's result, one for the answer.
    assert Message.objects.filter(run=run).count() == messages + 2


def test_a_cancelled_run_is_pruned_and_a_retry_from_a_pruned_checkpoint_is_refused(personas, kept):
    run = waiting_run(personas)
    before = list(Checkpoint.objects.filter(run=run).order_by("number"))
    named = run.approvals.get().checkpoint.number
    run_cancel(run_id=run.id, user=personas.carol)
    last = before[-1].number
    assert numbers(run) == sorted({named, last - 1, last})
    pruned = next(c for c in before if c.number not in numbers(run))
    with pytest.raises(NotFound, match="no such checkpoint"):
        run_retry(run_id=run.id, user=personas.carol, checkpoint_id=str(pruned.id))
    # The latest still carries the run on: its waiting call is asked again, and approved, it ends.
    run_retry(run_id=run.id, user=personas.carol)
    run_execute(run_id=run.id, worker="retention")
    run.refresh_from_db()
    assert run.status == RunStatus.INPUT_REQUIRED, run.error
    approval = run.approvals.filter(status="pending").get()
    approval_decide(
        approval_id=approval.id,
        reviewer=personas.alice,
        verdict="approve",
        checkpoint_id=str(approval.checkpoint_id),
    )
    run_execute(run_id=run.id, worker="retention")
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert run.output == "Emailed Ada."


def test_a_failed_run_is_pruned(personas, kept):
    run = waiting_run(personas)
    named = run.approvals.get().checkpoint.number
    last = numbers(run)[-1]
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        run_mark_failed(locked, "the tool's service is gone", kind="tool")
    assert numbers(run) == sorted({named, last - 1, last})


def test_a_follow_up_continues_a_pruned_run_from_its_latest_checkpoint(personas, kept):
    run = waiting_run(personas)
    approve(run, personas.alice)
    assert run.status == RunStatus.SUCCEEDED and len(numbers(run)) == kept + 1
    run_follow_up(run_id=run.id, user=personas.carol, input="And tell Bob.")
    run_execute(run_id=run.id, worker="retention")
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert run.output == "Done."  # the script's turns were all played: it read the whole log
    positions = list(Message.objects.filter(run=run).order_by("position").values_list("position", flat=True))
    assert positions == list(range(len(positions)))


def test_prune_checkpoints_prunes_runs_that_ended_under_a_larger_setting_and_not_open_ones(
    personas, settings, capsys
):
    settings.DESK_CHECKPOINTS_KEPT_AFTER_END = 50
    ended = waiting_run(personas)
    approve(ended, personas.alice)
    open_run = waiting_run(personas)
    assert ended.status == RunStatus.SUCCEEDED
    everything_ended, everything_open = numbers(ended), numbers(open_run)

    settings.DESK_CHECKPOINTS_KEPT_AFTER_END = 1
    call_command("prune_checkpoints", batch=1)
    named = ended.approvals.get().checkpoint.number
    assert numbers(ended) == [named, everything_ended[-1]]
    assert numbers(open_run) == everything_open
    gone = len(everything_ended) - 2
    assert f"pruned {gone} checkpoints from 1 ended runs" in capsys.readouterr().out
