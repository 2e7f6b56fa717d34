"""Threads: a succeeded run takes a follow-up message from its submitter and runs again on
the same message log and checkpoints, as its next turn.

The follow-up is written the way a step is: in one transaction holding the run's row lock,
the user message is appended to the log at the position the last checkpoint ends at, and a
new checkpoint (the finished state, `followed_up()`) says the model speaks next. The run is
queued and `resume` is sent on commit; a worker claims it like any other queued run, in a
new attempt, and the sweeper re-sends it if that message is lost.

Only a `succeeded` run takes one. A failed or cancelled run may have stopped in the middle
of a batch of tool calls (a user message there would break the conversation's shape) or
for a reason the submitter should look at: retry it first (`run_retry`), then follow up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.db import transaction

from agents.state import SCHEMA_VERSION, SnapshotError
from reviewdesk.accounts.roles import is_submitter
from reviewdesk.audit.services import audit_record
from reviewdesk.events.services import event_emit
from reviewdesk.lib.errors import Conflict, Forbidden
from reviewdesk.runs.access import run_audience, run_get_visible
from reviewdesk.runs.checkpoints import checkpoint_state, snapshot_column
from reviewdesk.runs.models import ENDED, Checkpoint, FollowUp, Message, Run, RunStatus
from reviewdesk.runs.representation import run_follow_up_data
from reviewdesk.runs.transitions import RESUME_TASK, run_retry_budgets_renew, send_on_commit, task_id_assign

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def run_check_follow_up(*, run_id: Any, user: User) -> Run:
    """Lock the run and check `user` may post to it now; the locked run.

    Lock: the run's row (select_for_update); call inside the transaction that posts.
    404 when the run is missing or not the user's to see; 403 when it is not theirs;
    409 `active` while it runs or waits, `not_succeeded` after a failure or a cancel.
    """
    visible = run_get_visible(run_id=run_id, user=user)
    run = Run.objects.select_for_update().get(pk=visible.pk)
    if run.submitted_by_id != user.pk or not is_submitter(user):
        raise Forbidden("only the run's submitter can continue its thread")
    if run.is_external:
        raise Conflict("an external run's thread goes on in its framework, not here", code="external")
    if run.status not in ENDED:
        raise Conflict(f"the run is still active ({run.status}); post when it has ended", code="active")
    if run.status != RunStatus.SUCCEEDED:
        raise Conflict(
            f"only a succeeded run takes a follow-up; this one is {run.status}: retry it first",
            code="not_succeeded",
        )
    return run


def run_do_follow_up(*, run: Run, user: User, input: str) -> FollowUp:
    """Append the message, checkpoint the next turn, queue the run. Caller holds the run lock."""
    latest = Checkpoint.objects.filter(run=run).order_by("-number").first()
    # Belt and braces behind the status check: the conversation itself must be finished.
    if latest is None:
        raise Conflict("the run has no checkpoint to continue from")
    try:
        state = checkpoint_state(latest).followed_up()
    except SnapshotError as exc:
        raise Conflict(f"the run cannot continue from its last checkpoint: {exc}") from None
    position = state.message_count - 1
    Message.objects.create(run=run, position=position, role="user", body={"role": "user", "content": input})
    Checkpoint.objects.create(
        run=run,
        branch=run.branch,
        number=latest.number + 1,
        schema_version=SCHEMA_VERSION,  # what to_snapshot writes, not what the last one held
        message_count=state.message_count,
        snapshot=snapshot_column(state.to_snapshot()),
    )
    follow_up = FollowUp.objects.create(
        run=run, number=run.follow_ups.count() + 1, input=input, position=position, posted_by=user
    )
    run.status = RunStatus.QUEUED
    run.output = run.error = run.next_attempt_at = None
    run.error_kind = ""
    # A new turn: the automatic-retry budget and the tools' retry budgets afresh, as a retry by
    # hand gives them (the earlier turns' failures stay on their ledger rows).
    run_retry_budgets_renew(run)
    run.revision += 1
    task_id_assign(run)  # sent at the end, after the run's event
    run.save(
        update_fields=[
            "status",
            "output",
            "error",
            "error_kind",
            "retries",
            "next_attempt_at",
            "revision",
            "task_id",
            "updated_at",
        ]
    )
    audit_record(
        actor=user,
        action="run.followed_up",
        subject_type="run",
        subject_id=run.id,
        data={"number": follow_up.number, "position": position},
    )
    event_emit(
        type="run.updated",
        data=run_follow_up_data(run, follow_up),
        run_id=run.pk,
        audience=run_audience(run),
    )
    send_on_commit(RESUME_TASK, run)
    return follow_up


def run_follow_up(*, run_id: Any, user: User, input: str) -> FollowUp:
    """`POST /api/v1/runs/{id}/messages`: the run's next turn, started by its submitter."""
    with transaction.atomic():
        run = run_check_follow_up(run_id=run_id, user=user)
        return run_do_follow_up(run=run, user=user, input=input)
