"""A retry by hand after a tool stayed unavailable gives the tool its retry budgets afresh, and
a follow-up's next turn gives the run its budget afresh.

The budgets (DESK_TOOL_RETRIES a call, DESK_TOOL_RETRIES_PER_RUN a run) count the failed
tries on the run's ledger rows, which a retry keeps (their counts are the call's history):
the budget counts only the failures since the run was last retried by hand or followed up.
"""

from __future__ import annotations

import pytest

from agents.tools import ToolUnavailable
from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.demo.world import DjangoDemoWorld
from reviewdesk.runs.execution import run_execute
from reviewdesk.runs.models import RunStatus, SideEffect
from reviewdesk.runs.services import run_retry

pytestmark = pytest.mark.django_db


class DownWorld:
    """A mail server that refuses every connection, counting the tries."""

    tries = 0

    def send_email(self, *, to: str, subject: str, body: str, idempotency_key: str) -> str:
        DownWorld.tries += 1
        raise ToolUnavailable("the mail server is down")


@pytest.fixture
def down_mail(settings):
    DownWorld.tries = 0
    settings.DESK_TOOL_WORLD = f"{__name__}.DownWorld"
    settings.DESK_TOOL_RETRY_BACKOFF_SECONDS = 0.001  # short waits: every try in the same task
    return DownWorld


def approve(run, approval, reviewer) -> None:
    approval_decide(
        approval_id=approval.id,
        reviewer=reviewer,
        verdict="approve",
        checkpoint_id=str(approval.checkpoint_id),
    )


def run_to_unavailable(run) -> None:
    run_execute(run_id=run.id, worker="in-process")
    run.refresh_from_db()
    assert (run.status, run.error_kind) == (RunStatus.FAILED, "unavailable"), run.error


def test_a_retry_by_hand_gives_the_call_its_whole_budget_again(
    interrupted_run, personas, down_mail, settings
):
    settings.DESK_TOOL_RETRIES = 2
    run, approval = interrupted_run()
    approve(run, approval, personas.alice)
    run_to_unavailable(run)
    assert down_mail.tries == 3  # the first try and two retries

    run_retry(run_id=run.id, user=personas.carol)
    run_to_unavailable(run)

    assert down_mail.tries == 6, "the retry by hand got the call's budget again: three more tries"
    effect = SideEffect.objects.get(run=run, tool="send_email")
    assert (effect.status, effect.retries) == ("retrying", 6)  # the row still counts every failure


def test_a_retry_by_hand_gives_the_run_its_whole_budget_again(interrupted_run, personas, down_mail, settings):
    settings.DESK_TOOL_RETRIES, settings.DESK_TOOL_RETRIES_PER_RUN = 10, 1
    run, approval = interrupted_run()
    approve(run, approval, personas.alice)
    run_to_unavailable(run)
    assert down_mail.tries == 2  # the first try and the run's one retry

    run_retry(run_id=run.id, user=personas.carol)
    run_to_unavailable(run)

    assert down_mail.tries == 4, "the retry by hand got the run's budget again: two more tries"


# --- A follow-up is a new turn: the run's tool budget afresh ---------------------------------
class FlakyWorld(DjangoDemoWorld):
    """The demo's world, with a mail server that refuses the next `refusals` connections."""

    refusals = 0

    def send_email(self, *, to: str, subject: str, body: str, idempotency_key: str) -> str:
        if FlakyWorld.refusals:
            FlakyWorld.refusals -= 1
            raise ToolUnavailable("connection refused")
        return super().send_email(to=to, subject=subject, body=body, idempotency_key=idempotency_key)


EMAIL_TWICE_SCRIPT = [
    {
        "tool_calls": [
            {
                "name": "send_email",
                "arguments": {"to": "ada@example.com", "subject": "Refund", "body": "Sent."},
            }
        ]
    },
    {"content": "Emailed Ada."},
    {
        "tool_calls": [
            {
                "name": "send_email",
                "arguments": {"to": "ada@example.com", "subject": "Refund", "body": "Again."},
            }
        ]
    },
    {"content": "Emailed Ada again."},
]


def test_a_follow_up_gives_the_run_its_tool_retry_budget_afresh(
    interrupted_run, personas, api_as, settings, mailoutbox
):
    """The first turn's email went out on the run's last allowed retry; the follow-up's email is
    refused once, and is retried (not failed as over the run's budget) and sent."""
    FlakyWorld.refusals = 0
    settings.DESK_TOOL_WORLD = f"{__name__}.FlakyWorld"
    settings.DESK_TOOL_RETRY_BACKOFF_SECONDS = 0.001  # short waits: every try in the same task
    settings.DESK_TOOL_RETRIES, settings.DESK_TOOL_RETRIES_PER_RUN = 10, 2
    run, approval = interrupted_run(script=EMAIL_TWICE_SCRIPT)
    approve(run, approval, personas.alice)
    FlakyWorld.refusals = 2  # the run's whole budget: two retries, then it goes through
    run_execute(run_id=run.id, worker="in-process")
    run.refresh_from_db()
    assert (run.status, run.output) == (RunStatus.SUCCEEDED, "Emailed Ada."), run.error
    assert SideEffect.objects.get(run=run).retries == 2 and len(mailoutbox) == 1

    response = api_as(personas.carol, "submit").post(
        f"/api/v1/runs/{run.id}/messages", {"input": "Tell her once more."}, format="json"
    )
    assert response.status_code == 201, response.json()
    run_execute(run_id=run.id, worker="in-process")
    run.refresh_from_db()
    assert run.status == RunStatus.INPUT_REQUIRED, run.error
    approve(run, run.approvals.get(status="pending"), personas.alice)
    FlakyWorld.refusals = 1
    run_execute(run_id=run.id, worker="in-process")
    run.refresh_from_db()

    assert (run.status, run.output) == (RunStatus.SUCCEEDED, "Emailed Ada again."), run.error
    assert len(mailoutbox) == 2 and FlakyWorld.refusals == 0
    # The ledger rows still count every failure: the budget counts from the follow-up.
    assert sorted(SideEffect.objects.filter(run=run).values_list("retries", flat=True)) == [1, 2]
