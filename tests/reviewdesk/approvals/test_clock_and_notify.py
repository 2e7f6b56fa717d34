"""Time, escalation and email notifications, with a shortened clock (settings override)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.core import signing
from django.test import Client
from django.utils import timezone

from reviewdesk.accounts.models import NotificationPreference
from reviewdesk.approvals.access import may_decide_by_name
from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.approvals.lifecycle.clock import (
    approval_escalate,
    approval_remind,
    approvals_escalate,
    approvals_remind,
)
from reviewdesk.approvals.lifecycle.digest import digests_send
from reviewdesk.approvals.lifecycle.handover import approval_handover
from reviewdesk.approvals.lifecycle.links import LINK_SALT
from reviewdesk.approvals.lifecycle.notify import approvals_notify
from reviewdesk.approvals.models import ApprovalLink, ApprovalRequest, Decision
from reviewdesk.approvals.tasks import approvals_tick
from reviewdesk.audit.models import AuditEvent
from reviewdesk.events.models import DeskEvent
from reviewdesk.lib.times import rfc3339_sortable
from reviewdesk.runs.execution import run_execute
from reviewdesk.runs.models import RunStatus
from tests.reviewdesk.approvals.conftest import EXECUTE_SCRIPT, refund_script

pytestmark = pytest.mark.django_db


@pytest.fixture
def short_clock(settings):
    settings.DESK_RESPONSE_TARGETS = {"demo.send_email": 60}
    settings.DESK_ESCALATION_CHAINS = {"demo.send_email": ["bob"]}
    settings.DESK_NOTIFY_EMAIL = True
    settings.DESK_PUBLIC_URL = "http://desk.test"


def later(approval, seconds):
    """`seconds` after the clock started (60 s before respond_by)."""
    return approval.respond_by + timedelta(seconds=seconds - 60)


def link_in(message) -> str:
    return re.search(r"http://desk\.test(/approvals/link/[^/\s]+/)", message.body).group(1)


def test_an_item_gets_its_target_and_the_assignee_an_email_with_a_link(
    short_clock, interrupted_run, mailoutbox
):
    _run, approval = interrupted_run(reviewers=["alice"])

    assert abs((approval.respond_by - approval.created_at).total_seconds() - 60) < 1
    assert approvals_notify(now=timezone.now()) == 1
    assert approvals_notify(now=timezone.now()) == 0  # once
    (message,) = mailoutbox
    assert message.to == ["alice@example.com"] and "send_email" in message.subject
    assert link_in(message)


def test_past_half_the_target_the_assignee_is_reminded_once(short_clock, interrupted_run, mailoutbox):
    _run, approval = interrupted_run(reviewers=["alice"])

    assert approvals_remind(now=later(approval, 29)) == []
    assert approvals_remind(now=later(approval, 31)) == [approval.pk]
    assert approvals_remind(now=later(approval, 40)) == []

    approval.refresh_from_db()
    assert approval.reminded_at == later(approval, 31)
    assert AuditEvent.objects.filter(action="approval.reminded", subject_id=str(approval.pk)).count() == 1
    assert DeskEvent.objects.filter(type="approval.updated").last().data["reminded_at"] is not None


def test_past_the_target_it_escalates_to_the_next_reviewer_who_may_then_decide(
    short_clock, interrupted_run, personas, api_as, mailoutbox
):
    run, approval = interrupted_run(reviewers=["alice"])
    assert api_as(personas.bob, "review").get(f"/api/v1/approvals/{approval.id}").status_code == 404

    now = later(approval, 61)
    assert approvals_escalate(now=now) == 1

    approval.refresh_from_db()
    assert approval.assignees == ["alice", "bob"] and approval.escalation_level == 1
    assert approval.respond_by == now + timedelta(seconds=60)  # the clock restarts
    audit = AuditEvent.objects.get(action="approval.escalated", subject_id=str(approval.pk))
    assert audit.data["to"] == "bob"
    event = DeskEvent.objects.filter(type="approval.updated").last()
    assert event.data["escalation_level"] == 1 and personas.bob.pk in event.audience
    approvals_notify(now=timezone.now())
    assert [m.to for m in mailoutbox] == [["bob@example.com"]]
    assert "Escalated" in mailoutbox[0].subject
    decided = api_as(personas.bob, "review").post(
        f"/api/v1/approvals/{approval.id}/decision",
        {"verdict": "approve", "checkpoint_id": str(approval.checkpoint_id)},
        format="json",
    )
    assert decided.status_code == 201
    run_execute(run_id=run.id)  # the gate, at execution, accepts bob's signature too
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error


def test_two_escalations_racing_leave_one_outcome(short_clock, interrupted_run):
    run, approval = interrupted_run(reviewers=["alice"])
    now = later(approval, 61)

    first = approval_escalate(approval_id=approval.pk, level=0, run=run, now=now)
    second = approval_escalate(approval_id=approval.pk, level=0, run=run, now=now)

    approval.refresh_from_db()
    assert (first, second) == (1, 0)
    assert approval.escalation_level == 1 and approval.assignees == ["alice", "bob"]
    assert AuditEvent.objects.filter(action="approval.escalated").count() == 1


def test_a_decided_item_never_escalates(short_clock, interrupted_run, personas, api_as):
    run, approval = interrupted_run(reviewers=["alice"])
    api_as(personas.alice, "review").post(
        f"/api/v1/approvals/{approval.id}/decision",
        {"verdict": "reject", "reason": "no", "checkpoint_id": str(approval.checkpoint_id)},
        format="json",
    )

    assert approval_escalate(approval_id=approval.pk, level=0, run=run, now=later(approval, 61)) == 0
    approval.refresh_from_db()
    assert approval.status == "rejected" and approval.escalation_level == 0


def test_an_smtp_failure_is_logged_and_audited_and_never_raises(short_clock, settings, interrupted_run):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", 1, 1
    _run, approval = interrupted_run(reviewers=["alice"])

    result = approvals_tick()

    assert result["notified"] == 0
    assert AuditEvent.objects.filter(action="notification.failed", subject_id=str(approval.pk)).exists()


def test_the_link_opens_the_page_but_does_not_decide_and_works_once(
    short_clock, interrupted_run, personas, mailoutbox
):
    _run, approval = interrupted_run(reviewers=["alice"])
    approvals_notify(now=timezone.now())
    link = link_in(mailoutbox[0])
    alice = Client()
    alice.force_login(personas.alice)

    opened = alice.get(link)
    page = alice.get(opened["Location"])
    again = alice.get(link)

    assert opened.status_code == 302 and opened["Location"] == f"/approvals/{approval.id}/"
    assert page.status_code == 200 and 'value="approve"' in page.content.decode()
    approval.refresh_from_db()
    assert approval.status == "pending" and not Decision.objects.exists()
    assert again.status_code == 410 and "used already" in again.content.decode()


def test_a_forged_an_expired_or_another_reviewers_link_is_refused(
    short_clock, settings, interrupted_run, personas, mailoutbox
):
    _run, _approval = interrupted_run(reviewers=["alice"])
    approvals_notify(now=timezone.now())
    link = link_in(mailoutbox[0])
    link_id = ApprovalLink.objects.get().pk
    forged = "/approvals/link/" + signing.dumps(str(link_id), salt="another-salt") + "/"
    bob, alice = Client(), Client()
    bob.force_login(personas.bob)
    alice.force_login(personas.alice)

    assert alice.get(forged).status_code == 400
    assert bob.get(link).status_code == 403
    settings.DESK_NOTIFY_LINK_MAX_AGE_SECONDS = -1
    assert alice.get(link).status_code == 410
    assert ApprovalLink.objects.get().used_at is None  # none of these spent it
    assert signing.loads(link.split("/")[3], salt=LINK_SALT) == str(link_id)


def test_a_logged_out_visitor_is_sent_to_log_in_first(short_clock, interrupted_run, mailoutbox):
    interrupted_run(reviewers=["alice"])
    approvals_notify(now=timezone.now())

    response = Client().get(link_in(mailoutbox[0]))

    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    assert ApprovalLink.objects.get().used_at is None


def test_an_expired_item_tells_the_model_no_human_decided_in_time_not_a_rejection(interrupted_run):
    from reviewdesk.approvals.lifecycle.expiry import approvals_expire
    from reviewdesk.runs.execution import run_execute
    from reviewdesk.runs.models import Message

    run, approval = interrupted_run()
    approvals_expire(now=approval.expires_at + timedelta(seconds=1))
    run_execute(run_id=run.id)

    results = [m.body["content"] for m in Message.objects.filter(run=run) if m.body["role"] == "tool"]
    assert any("No human decision in time" in r for r in results)
    assert not any("rejected" in r for r in results)
    assert ApprovalRequest.objects.get(pk=approval.pk).status == "expired"


def test_the_desk_shows_the_clock_on_the_card_and_the_page(short_clock, interrupted_run, personas):
    _, approval = interrupted_run(reviewers=["alice"])
    alice = Client()
    alice.force_login(personas.alice)
    respond_by = rfc3339_sortable(approval.respond_by)

    desk = alice.get("/").content.decode()
    page = alice.get(f"/approvals/{approval.id}/").content.decode()

    assert f'data-respond-by="{respond_by}"' in desk and 'class="countdown target"' in desk
    assert f'class="countdown target" data-expires="{respond_by}"' in page


def test_two_reminders_racing_for_one_item_remind_once(short_clock, interrupted_run):
    run, approval = interrupted_run(reviewers=["alice"])
    now = later(approval, 31)

    first = approval_remind(approval_id=approval.pk, level=0, run=run, now=now)
    second = approval_remind(approval_id=approval.pk, level=0, run=run, now=now)

    assert (first, second) == (True, False)
    assert AuditEvent.objects.filter(action="approval.reminded").count() == 1


def test_a_link_past_its_lifetime_is_refused_as_expired(
    short_clock, settings, interrupted_run, personas, mailoutbox
):
    interrupted_run(reviewers=["alice"])
    approvals_notify(now=timezone.now())
    alice = Client()
    alice.force_login(personas.alice)
    settings.DESK_NOTIFY_LINK_MAX_AGE_SECONDS = 0

    response = alice.get(link_in(mailoutbox[0]))

    assert response.status_code == 410 and "expired" in response.content.decode()


def test_an_item_past_its_expiry_is_neither_escalated_nor_reminded(short_clock, interrupted_run, mailoutbox):
    """The expiry and the tick are separate beats: an item the sweeper has not expired yet but
    whose expiry has passed cannot be decided (410), so nobody is called in or reminded to."""
    _run, approval = interrupted_run(reviewers=["alice"])
    ApprovalRequest.objects.filter(pk=approval.pk).update(expires_at=later(approval, 20))
    mailoutbox.clear()

    assert approvals_remind(now=later(approval, 31)) == []
    assert approvals_escalate(now=later(approval, 61)) == 0

    approval.refresh_from_db()
    assert approval.escalation_level == 0 and approval.reminded_at is None
    assert not AuditEvent.objects.filter(action__in=["approval.escalated", "approval.reminded"]).exists()


def test_when_the_chain_is_spent_the_clock_stops_and_the_item_waits(short_clock, interrupted_run):
    _run, approval = interrupted_run(reviewers=["alice"])
    first = later(approval, 61)
    approvals_escalate(now=first)

    assert approvals_escalate(now=first + timedelta(seconds=61)) == 0

    approval.refresh_from_db()
    assert approval.status == "pending" and approval.respond_by is None and approval.escalation_level == 1
    assert AuditEvent.objects.filter(action="approval.overdue", subject_id=str(approval.pk)).exists()
    # The cards on open desks stop counting down to the target too: the change is pushed.
    last = DeskEvent.objects.filter(type="approval.updated").order_by("-id").first()
    assert last.data["id"] == str(approval.pk) and last.data["respond_by"] is None


def test_an_item_open_to_every_reviewer_stays_open_and_its_escalation_emails_the_chain(
    short_clock, interrupted_run, mailoutbox
):
    """Open to all, it names nobody: no mail at once, each reviewer's digest lists it; its
    escalation to bob by name mails bob at once (the default settings)."""
    _, approval = interrupted_run()
    assert approvals_notify(now=timezone.now()) == 0
    assert digests_send(now=timezone.now()) == 3
    assert sorted(m.to[0] for m in mailoutbox) == [
        "admin@example.com",
        "alice@example.com",
        "bob@example.com",
    ]
    mailoutbox.clear()

    approvals_escalate(now=later(approval, 61))
    approvals_notify(now=timezone.now())

    approval.refresh_from_db()
    assert approval.assignees == [] and approval.escalation_level == 1
    assert [m.to for m in mailoutbox] == [["bob@example.com"]]
    assert "Escalated to you: send_email" in mailoutbox[0].subject


def test_escalation_lets_the_chains_reviewer_decide_and_no_one_else(
    short_clock, interrupted_run, personas, api_as
):
    run, approval = interrupted_run(reviewers=["alice"])
    assert not may_decide_by_name("bob", str(run.pk), str(approval.pk))

    approvals_escalate(now=later(approval, 61))

    assert may_decide_by_name("bob", str(run.pk), str(approval.pk))  # the gate's check at execution time
    assert not may_decide_by_name("admin", str(run.pk), str(approval.pk))
    refused = api_as(personas.admin, "review").post(
        f"/api/v1/approvals/{approval.id}/decision",
        {"verdict": "approve", "checkpoint_id": str(approval.checkpoint_id)},
        format="json",
    )
    assert refused.status_code == 403


def test_a_reminder_of_a_group_routed_item_is_pushed_to_the_group_not_the_runs_reviewers(
    settings, interrupted_run, personas, dave
):
    settings.DESK_RESPONSE_TARGETS = {"demo.refund_payment": 60}
    _run, approval = interrupted_run(script=refund_script(5000), reviewers=["alice"])
    assert approval.assignees == ["group:finance"]

    assert approvals_remind(now=later(approval, 31)) == [approval.pk]

    pushed = DeskEvent.objects.filter(type="approval.updated").latest("id")
    assert dave.id in pushed.audience  # the group the item is routed to
    assert personas.alice.id not in pushed.audience  # named on the run, but may not see this item


def test_an_escalation_of_a_group_routed_item_is_pushed_to_the_group_and_the_chain(
    settings, interrupted_run, personas, dave
):
    settings.DESK_RESPONSE_TARGETS = {"demo.refund_payment": 60}
    settings.DESK_ESCALATION_CHAINS = {"demo.refund_payment": ["bob"]}
    _run, approval = interrupted_run(script=refund_script(5000), reviewers=["alice"])

    assert approvals_escalate(now=later(approval, 61)) == 1

    pushed = DeskEvent.objects.filter(type="approval.updated").latest("id")
    assert {dave.id, personas.bob.id} <= set(pushed.audience)
    assert personas.alice.id not in pushed.audience


def test_an_item_routed_to_a_group_emails_its_members(settings, interrupted_run, personas, dave, mailoutbox):
    settings.DESK_NOTIFY_EMAIL = True
    settings.DESK_PUBLIC_URL = "http://desk.test"
    _run, approval = interrupted_run(script=refund_script(5000))
    assert approval.assignees == ["group:finance"]

    assert approvals_notify(now=timezone.now()) == 0  # through a group, not by name: the digest
    assert digests_send(now=timezone.now()) == 1

    assert [m.to for m in mailoutbox] == [["dave@example.com"]]
    assert mailoutbox[0].subject == "[Review Desk] 1 call waits for your review: 1 refund_payment"

    # Dave asks for one mail per item: the next one routed to finance is mailed to him at once.
    NotificationPreference.objects.filter(user=dave).update(mode="every")  # the digest made the row
    mailoutbox.clear()
    interrupted_run(script=refund_script(5000))
    assert approvals_notify(now=timezone.now()) == 1
    assert [m.to for m in mailoutbox] == [["dave@example.com"]]


def test_a_hand_over_emails_the_new_assignee(short_clock, interrupted_run, personas, mailoutbox):
    _run, approval = interrupted_run(reviewers=["alice"])
    assert approvals_notify(now=timezone.now()) == 1
    mailoutbox.clear()

    approval_handover(approval_id=approval.id, by=personas.alice, to="bob", note="yours")

    assert approvals_notify(now=timezone.now()) == 1
    assert [m.to for m in mailoutbox] == [["bob@example.com"]]


def test_a_hand_over_after_a_vote_emails_the_new_assignee_not_the_voter(
    short_clock, interrupted_run, personas, mailoutbox
):
    _run, approval = interrupted_run(script=EXECUTE_SCRIPT)
    approval_decide(
        approval_id=approval.id,
        reviewer=personas.alice,
        verdict="approve",
        checkpoint_id=str(approval.checkpoint_id),
    )
    approvals_notify(now=timezone.now())
    mailoutbox.clear()

    approval_handover(approval_id=approval.id, by=personas.bob, to="admin", note="")
    approvals_notify(now=timezone.now())

    assert [m.to for m in mailoutbox] == [["admin@example.com"]]  # alice stays a target, but voted
