"""A click in Slack is a decision made on the server with the desk's rules (in-process: the
test client and the real database; the Slack stand-in answers over HTTP)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from reviewdesk.accounts.roles import REVIEWERS, SUBMITTERS
from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.approvals.models import ApprovalRequest, ApprovalStatus, Decision
from reviewdesk.audit.models import AuditEvent
from reviewdesk.runs.execution import run_execute
from reviewdesk.runs.services import run_cancel, run_submit
from reviewdesk.slack.models import SlackLink
from tests.conftest import make_user
from tests.reviewdesk.approvals.conftest import EXECUTE_SCRIPT, asking
from tests.reviewdesk.slack.helpers import interact, link, value_of
from tests.slack_stand_in import click, reject_submission

pytestmark = pytest.mark.django_db


def told(slack, user: str) -> str:
    """The newest ephemeral reply to `user`."""
    replies = [c.params for c in slack.of("chat.postEphemeral") if c.params["user"] == user]
    assert replies, "nothing was said to the clicker"
    return replies[-1]["text"]


def status_of(approval) -> str:
    approval.refresh_from_db()
    return approval.status


def own_run(submitter):
    """A run `submitter` submitted, advanced in-process until its send_email waits."""
    run = run_submit(
        submitter=submitter,
        agent="demo",
        input="x",
        model={
            "provider": "scripted",
            "script": [
                {
                    "tool_calls": [
                        {
                            "name": "send_email",
                            "arguments": {"to": "ada@example.com", "subject": "s", "body": "b"},
                        }
                    ]
                },
                {"content": "ok"},
            ],
        },
    )
    run_execute(run_id=run.id, worker="in-process")
    return run


def approve(approval, user: str = "UALICE"):
    answer = interact(click("desk_approve", value_of(approval), user=user))
    assert answer.status_code == 200
    return answer


def test_approve_decides_as_the_linked_reviewer_signed_and_audited_with_the_slack_user_and_link(
    slack, interrupted_run, personas
):
    the_link = link(personas.alice, "UALICE")
    _run, approval = interrupted_run(reviewers=["alice"])

    approve(approval)

    assert status_of(approval) == ApprovalStatus.APPROVED
    decision = Decision.objects.get(request=approval)
    assert decision.reviewer == personas.alice and decision.signature  # signed as from the desk
    assert decision.payload["reviewer"] == "alice"
    row = AuditEvent.objects.get(action="decision.approve", subject_id=str(approval.pk))
    assert row.actor == personas.alice
    assert row.data["via"] == {
        "channel": "slack",
        "slack_team": "T0TEST",
        "slack_user": "UALICE",
        "link": the_link.pk,
    }
    assert told(slack, "UALICE").startswith("Approved send_email")


def test_a_decision_on_the_desk_has_no_via(slack, interrupted_run, personas):
    _run, approval = interrupted_run(reviewers=["alice"])
    approval_decide(
        approval_id=approval.pk,
        reviewer=personas.alice,
        verdict="approve",
        checkpoint_id=approval.checkpoint_id,
    )
    assert "via" not in AuditEvent.objects.get(action="decision.approve").data


def test_reject_opens_the_reason_dialog_and_its_submit_rejects_with_the_reason(
    slack, interrupted_run, personas
):
    link(personas.alice, "UALICE")
    _run, approval = interrupted_run(reviewers=["alice"])

    reject = click("desk_reject", value_of(approval), user="UALICE")
    assert interact(reject).status_code == 200
    (opened,) = slack.of("views.open")
    assert opened.params["trigger_id"] == reject["trigger_id"]
    assert opened.params["view"]["private_metadata"] == value_of(approval)
    assert status_of(approval) == ApprovalStatus.PENDING  # the dialog decides nothing yet

    answer = interact(reject_submission(value_of(approval), "  Wrong customer.  ", user="UALICE"))
    assert answer.json() == {"response_action": "clear"}
    assert status_of(approval) == ApprovalStatus.REJECTED
    assert Decision.objects.get(request=approval).reason == "Wrong customer."


def test_an_unlinked_slack_user_is_told_how_to_link_and_nothing_is_decided(slack, interrupted_run, personas):
    link(personas.alice, "UALICE")
    _run, approval = interrupted_run(reviewers=["alice"])

    approve(approval, user="UMALLORY")
    answer = interact(reject_submission(value_of(approval), "no", user="UMALLORY"))

    assert status_of(approval) == ApprovalStatus.PENDING
    assert "/desk link" in told(slack, "UMALLORY") and "http://desk.test/settings/" in told(slack, "UMALLORY")
    assert answer.json()["response_action"] == "errors"
    assert not slack.of("views.open")


def test_the_same_slack_user_id_in_another_workspace_is_not_the_linked_one(slack, interrupted_run, personas):
    link(personas.alice, "UALICE", team="T0TEST")
    _run, approval = interrupted_run(reviewers=["alice"])

    interact(click("desk_approve", value_of(approval), user="UALICE", team="T0OTHER"))

    assert status_of(approval) == ApprovalStatus.PENDING


def test_a_deactivated_account_clicks_nothing(slack, interrupted_run, personas):
    link(personas.alice, "UALICE")
    _run, approval = interrupted_run(reviewers=["alice"])
    personas.alice.is_active = False
    personas.alice.save()

    approve(approval)

    assert status_of(approval) == ApprovalStatus.PENDING
    assert "not linked" in told(slack, "UALICE")


def test_the_runs_submitter_may_not_decide_from_slack(slack, personas):
    """Four eyes: sam submits and reviews; his own run's call is not his to approve."""
    sam = make_user("sam", SUBMITTERS, REVIEWERS)
    link(sam, "USAM")

    run = own_run(sam)
    approval = run.approvals.get()

    approve(approval, user="USAM")

    assert status_of(approval) == ApprovalStatus.PENDING
    assert "you submitted this run" in told(slack, "USAM")


def test_an_item_assigned_to_another_reviewer_is_refused(slack, interrupted_run, personas):
    link(personas.alice, "UALICE")
    _run, approval = interrupted_run(reviewers=["bob"])

    approve(approval)

    assert status_of(approval) == ApprovalStatus.PENDING
    assert "Not decided" in told(slack, "UALICE")


def test_a_click_on_an_item_decided_expired_or_cancelled_says_so_and_changes_nothing(
    slack, interrupted_run, personas
):
    link(personas.alice, "UALICE")
    _run, decided = interrupted_run(reviewers=["alice", "bob"])
    approval_decide(
        approval_id=decided.pk,
        reviewer=personas.bob,
        verdict="reject",
        checkpoint_id=decided.checkpoint_id,
        reason="no",
    )
    approve(decided)
    assert "already rejected" in told(slack, "UALICE")
    assert Decision.objects.filter(request=decided).count() == 1

    _run, expired = interrupted_run(reviewers=["alice"])
    ApprovalRequest.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    approve(expired)
    assert "expired" in told(slack, "UALICE")
    assert not Decision.objects.filter(request=expired).exists()

    run, cancelled = interrupted_run(reviewers=["alice"])
    run_cancel(run_id=run.pk, user=run.submitted_by)
    interact(click("desk_reject", value_of(cancelled), user="UALICE"))
    assert "already cancelled" in told(slack, "UALICE")
    approve(cancelled)
    assert "cancelled" in told(slack, "UALICE")
    assert not Decision.objects.filter(request=cancelled).exists()


def test_a_button_drawn_at_another_checkpoint_is_refused_as_a_stale_page(slack, interrupted_run, personas):
    link(personas.alice, "UALICE")
    _run, approval = interrupted_run(reviewers=["alice"])
    old = value_of(approval).replace(str(approval.checkpoint_id), "00000000-0000-0000-0000-000000000000")

    interact(click("desk_approve", old, user="UALICE"))

    assert status_of(approval) == ApprovalStatus.PENDING
    assert "stale page" in told(slack, "UALICE")


def test_a_button_value_the_desk_did_not_draw_decides_nothing(slack, interrupted_run, personas):
    link(personas.alice, "UALICE")
    _run, approval = interrupted_run(reviewers=["alice"])
    for value in ("", "{}", "[1]", '{"approval": "nope", "checkpoint": "x"}', None):
        interact(click("desk_approve", value, user="UALICE"))
    assert status_of(approval) == ApprovalStatus.PENDING


def test_a_tool_that_needs_a_device_key_opens_the_desk_instead(slack, interrupted_run, personas, settings):
    settings.DESK_REQUIRE_DEVICE_KEYS = True
    link(personas.alice, "UALICE")
    _run, approval = interrupted_run(reviewers=["alice"])

    approve(approval)

    assert status_of(approval) == ApprovalStatus.PENDING
    assert "device key" in told(slack, "UALICE") and f"http://desk.test/approvals/{approval.pk}/" in told(
        slack, "UALICE"
    )


def test_a_question_is_answered_on_the_desk_not_in_slack(slack, interrupted_run, personas):
    link(personas.alice, "UALICE")
    _run, question = interrupted_run(script=asking(question="Which address?"), reviewers=["alice"])

    approve(question)

    assert status_of(question) == ApprovalStatus.PENDING
    assert not Decision.objects.filter(request=question).exists()


def test_a_quorum_takes_two_linked_reviewers_and_the_second_click_settles_it(
    slack, interrupted_run, personas
):
    link(personas.alice, "UALICE")
    link(personas.bob, "UBOB")
    _run, approval = interrupted_run(script=EXECUTE_SCRIPT)
    assert approval.required_approvals == 2

    approve(approval, "UALICE")
    assert status_of(approval) == ApprovalStatus.PENDING
    assert "1 of 2" in told(slack, "UALICE")
    approve(approval, "UALICE")  # once each
    assert "already voted" in told(slack, "UALICE")
    approve(approval, "UBOB")

    assert status_of(approval) == ApprovalStatus.APPROVED
    assert {d.reviewer.username for d in Decision.objects.filter(request=approval)} == {"alice", "bob"}
    assert SlackLink.objects.count() == 2


def test_the_reject_dialog_opens_only_for_one_who_may_decide_it(slack, personas):
    """The run's submitter sees the item (and is a reviewer) but may not decide it: no dialog
    to type a reason into for nothing."""
    sam = make_user("sam", SUBMITTERS, REVIEWERS)
    link(sam, "USAM")
    run = own_run(sam)

    interact(click("desk_reject", value_of(run.approvals.get()), user="USAM"))

    assert slack.of("views.open") == []
    assert "not yours to decide" in told(slack, "USAM")
