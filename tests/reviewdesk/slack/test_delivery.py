"""What goes to Slack, what happens when Slack cannot take it, and messages kept true (in-process:
each task body is called here, against the real database and the Slack stand-in over HTTP;
tests/e2e/test_slack.py runs the same through a real worker and beat)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from django.utils import timezone

from reviewdesk.accounts.models import NotificationPreference, NotifyMode
from reviewdesk.accounts.roles import REVIEWERS
from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.approvals.lifecycle.digest import digest_items, digests_send
from reviewdesk.approvals.lifecycle.notify import approvals_notify
from reviewdesk.audit.models import AuditEvent
from reviewdesk.slack.delivery import delivery_rows, message_send, slack_sweep
from reviewdesk.slack.models import MessageKind, MessageState, SlackChannel, SlackLink, SlackMessage
from reviewdesk.slack.outbox import SLACK_CHANNEL
from tests.conftest import make_user
from tests.reviewdesk.approvals.conftest import refund_script
from tests.reviewdesk.slack.helpers import buttons, interact, link
from tests.slack_stand_in import click

pytestmark = pytest.mark.django_db


def every_item(user) -> None:
    NotificationPreference.objects.update_or_create(user=user, defaults={"mode": NotifyMode.EVERY})


def posted_then_approved(interrupted_run, personas):
    """An item posted to alice in Slack, then approved by her on the desk: (item, message)."""
    link(personas.alice, "UALICE")
    _run, approval = interrupted_run(reviewers=["alice"])
    approvals_notify(now=timezone.now())
    message = SlackMessage.objects.get()
    message_send(message_id=message.pk)
    approval_decide(
        approval_id=approval.pk,
        reviewer=personas.alice,
        verdict="approve",
        checkpoint_id=approval.checkpoint_id,
    )
    return approval, message


def posted_blocks(slack) -> list[dict]:
    return slack.of("chat.postMessage")[-1].params["blocks"]


def test_a_linked_reviewer_gets_in_slack_what_the_desk_would_mail_and_no_mail(
    slack, interrupted_run, personas, mailoutbox
):
    link(personas.alice, "UALICE")
    _run, approval = interrupted_run(reviewers=["alice"])

    assert approvals_notify(now=timezone.now()) == 1
    (message,) = SlackMessage.objects.all()
    assert (message.kind, message.user, message.target) == (MessageKind.ITEM, personas.alice, "UALICE")
    assert message_send(message_id=message.pk) == "posted"

    (call,) = slack.of("chat.postMessage")
    assert call.params["channel"] == "UALICE"
    texts = str(call.params["blocks"])
    assert "ada@example.com" in texts and "Expires" in texts
    assert set(buttons(call.params["blocks"])) == {"desk_approve", "desk_reject", "desk_open"}
    assert buttons(call.params["blocks"])["desk_open"]["url"] == f"http://desk.test/approvals/{approval.pk}/"
    assert mailoutbox == []
    message.refresh_from_db()
    assert (message.state, message.channel, bool(message.ts)) == (MessageState.SENT, "DALICE", True)


def test_with_slack_notifications_off_or_slack_unconfigured_the_mail_comes_as_before(
    slack, interrupted_run, personas, mailoutbox, settings
):
    link(personas.alice, "UALICE")
    SlackLink.objects.update(notify=False)
    interrupted_run(reviewers=["alice"])
    approvals_notify(now=timezone.now())
    assert len(mailoutbox) == 1 and not SlackMessage.objects.exists()

    SlackLink.objects.update(notify=True)
    settings.SLACK_BOT_TOKEN = ""
    interrupted_run(reviewers=["alice"])
    approvals_notify(now=timezone.now())
    assert len(mailoutbox) == 2 and not SlackMessage.objects.exists()


def test_a_digest_goes_to_slack_as_one_message_of_at_most_six_and_the_rest_wait(
    slack, interrupted_run, personas
):
    link(personas.alice, "UALICE")
    NotificationPreference.objects.update_or_create(
        user=personas.alice, defaults={"immediate_assigned": False}
    )
    for _ in range(10):
        interrupted_run()
    approvals_notify(now=timezone.now())
    digests_send(now=timezone.now())  # alice's in Slack; the other reviewers' by mail
    (message,) = SlackMessage.objects.all()
    assert message.user == personas.alice
    assert len(digest_items(personas.alice)) == 4  # the next digest lists them
    assert message.kind == MessageKind.DIGEST and message.items.count() == 6 and message.more
    assert message_send(message_id=message.pk) == "posted"
    blocks = posted_blocks(slack)
    assert "6 items for your review" in blocks[0]["text"]["text"]
    assert sum(b["type"] == "actions" for b in blocks) == 6 and len(blocks) <= 50
    assert "More wait on the desk" in str(blocks[-1])


def test_slack_down_is_retried_with_backoff_and_then_the_reviewer_is_mailed_once(
    slack, interrupted_run, personas, mailoutbox, settings
):
    settings.DESK_SLACK_ATTEMPTS = 3
    link(personas.alice, "UALICE")
    _run, approval = interrupted_run(reviewers=["alice"])
    approvals_notify(now=timezone.now())
    message = SlackMessage.objects.get()
    slack.down()

    assert message_send(message_id=message.pk) == "retry"
    assert message_send(message_id=message.pk) == "retry"
    message.refresh_from_db()
    assert (message.state, message.attempts) == (
        MessageState.PENDING,
        2,
    ) and "onnection" in message.last_error
    assert mailoutbox == []
    assert message_send(message_id=message.pk) == "emailed"
    assert message_send(message_id=message.pk) == "skipped"  # settled: never twice

    message.refresh_from_db()
    assert message.state == MessageState.EMAILED
    (mail,) = mailoutbox
    assert mail.to == ["alice@example.com"] and "send_email" in mail.subject
    row = AuditEvent.objects.get(action="notification.slack_failed")
    assert row.data["fallback"] == "email" and row.data["approvals"] == [str(approval.pk)]


def test_slack_down_then_up_posts_the_message_once(slack, interrupted_run, personas, mailoutbox):
    link(personas.alice, "UALICE")
    interrupted_run(reviewers=["alice"])
    approvals_notify(now=timezone.now())
    message = SlackMessage.objects.get()
    slack.mode = "error"
    assert message_send(message_id=message.pk) == "retry"
    slack.mode = "ok"
    assert slack_sweep() == {"due": 1}  # due again, and no task holds it
    assert message_send(message_id=message.pk) == "posted"
    assert message_send(message_id=message.pk) == "skipped"
    assert len([c for c in slack.of("chat.postMessage")]) == 2  # the 503, then the post
    assert mailoutbox == []


def test_rate_limited_waits_as_long_as_slack_says(slack, interrupted_run, personas, settings):
    settings.DESK_SLACK_BACKOFF_SECONDS = 60
    link(personas.alice, "UALICE")
    interrupted_run(reviewers=["alice"])
    approvals_notify(now=timezone.now())
    message = SlackMessage.objects.get()
    slack.mode = "ratelimited"
    before = timezone.now()
    assert message_send(message_id=message.pk) == "retry"
    message.refresh_from_db()
    assert 0.5 < (message.due_at - before).total_seconds() < 5  # Retry-After: 1, not the 60 s backoff
    assert "ratelimited" in message.last_error


def test_a_message_held_by_one_worker_is_not_posted_by_another(slack, interrupted_run, personas):
    link(personas.alice, "UALICE")
    interrupted_run(reviewers=["alice"])
    approvals_notify(now=timezone.now())
    message = SlackMessage.objects.get()
    SlackMessage.objects.update(leased_until=timezone.now() + timezone.timedelta(seconds=30))
    assert message_send(message_id=message.pk) == "skipped"
    assert slack.of("chat.postMessage") == []


def test_a_decision_on_the_desk_redraws_every_message_about_it_with_who_decided_and_no_buttons(
    slack, interrupted_run, personas
):
    link(personas.alice, "UALICE")
    link(personas.bob, "UBOB")
    every_item(personas.bob)
    _run, approval = interrupted_run(reviewers=["alice", "bob"])
    approvals_notify(now=timezone.now())
    messages = list(SlackMessage.objects.all())
    assert len(messages) == 2
    for message in messages:
        message_send(message_id=message.pk)

    approval_decide(
        approval_id=approval.pk,
        reviewer=personas.bob,
        verdict="reject",
        checkpoint_id=approval.checkpoint_id,
        reason="Not now",
    )

    assert SlackMessage.objects.filter(stale=True).count() == 2
    for message in messages:
        assert message_send(message_id=message.pk) == "updated"
    updates = slack.of("chat.update")
    assert {(u.params["channel"], u.params["ts"]) for u in updates} == {
        (m.channel, m.ts) for m in SlackMessage.objects.all()
    }
    for update in updates:
        assert buttons(update.params["blocks"]) == {}
        assert "Rejected by bob" in str(update.params["blocks"]) and "Not now" in str(update.params["blocks"])
    assert not SlackMessage.objects.filter(stale=True).exists()


def test_a_failed_update_is_retried(slack, interrupted_run, personas):
    _approval, message = posted_then_approved(interrupted_run, personas)
    slack.mode = "error"
    assert message_send(message_id=message.pk) == "retry"
    message.refresh_from_db()
    assert message.stale and message.update_attempts == 1
    slack.mode = "ok"
    assert message_send(message_id=message.pk) == "updated"
    assert "Approved by alice" in str(slack.of("chat.update")[-1].params["blocks"])


def test_a_groups_channel_gets_its_items_and_only_the_linked_clicker_decides(
    slack, interrupted_run, personas
):
    dave = make_user("dave", REVIEWERS, "finance")
    SlackChannel.objects.create(group=Group.objects.get(name="finance"), channel_id="CFINANCE")
    interrupted_run(reviewers=["alice"])
    _run, large = interrupted_run(script=refund_script(5000))
    assert large.assignees == ["group:finance"]
    approvals_notify(now=timezone.now())
    (post,) = SlackMessage.objects.filter(kind=MessageKind.CHANNEL)
    assert post.target == "CFINANCE" and list(post.items.values_list("request_id", flat=True)) == [large.pk]
    assert message_send(message_id=post.pk) == "posted"
    value = buttons(posted_blocks(slack))["desk_approve"]["value"]
    link(personas.alice, "UALICE")
    link(dave, "UDAVE")

    interact(click("desk_approve", value, user="UALICE", channel="CFINANCE"))
    large.refresh_from_db()
    assert large.status == "pending"  # alice is not in finance: the channel grants nothing
    interact(click("desk_approve", value, user="UDAVE", channel="CFINANCE"))
    large.refresh_from_db()
    assert large.status == "approved" and large.decisions.get().reviewer == dave


def test_with_slack_off_a_decision_marks_nothing(
    slack, interrupted_run, personas, settings, django_assert_num_queries
):
    link(personas.alice, "UALICE")
    _run, approval = interrupted_run(reviewers=["alice"])
    approvals_notify(now=timezone.now())
    message_send(message_id=SlackMessage.objects.get().pk)
    settings.SLACK_SIGNING_SECRET = ""
    approval_decide(
        approval_id=approval.pk,
        reviewer=personas.alice,
        verdict="approve",
        checkpoint_id=approval.checkpoint_id,
    )
    assert not SlackMessage.objects.filter(stale=True).exists()
    assert message_send(message_id=SlackMessage.objects.get().pk) == "skipped"


def test_with_mail_off_slack_still_hears_and_nobody_is_mailed(
    slack, interrupted_run, personas, mailoutbox, settings
):
    link(personas.alice, "UALICE")
    settings.DESK_NOTIFY_EMAIL = False
    interrupted_run(reviewers=["alice", "bob"])
    approvals_notify(now=timezone.now())
    assert [m.user for m in SlackMessage.objects.all()] == [personas.alice]
    assert mailoutbox == []


def test_slack_turned_off_before_a_message_went_mails_its_reader_instead(
    slack, interrupted_run, personas, mailoutbox, settings
):
    link(personas.alice, "UALICE")
    interrupted_run(reviewers=["alice"])
    approvals_notify(now=timezone.now())
    settings.SLACK_BOT_TOKEN = ""
    assert slack_sweep() == {"due": 1}
    assert SlackMessage.objects.get().state == MessageState.EMAILED
    (mail,) = mailoutbox
    assert mail.to == ["alice@example.com"]
    assert slack.of("chat.postMessage") == []


def test_a_reader_who_unlinked_gets_the_message_redrawn_with_nothing_in_it(slack, interrupted_run, personas):
    link(personas.alice, "UALICE")
    _run, approval = interrupted_run(reviewers=["alice", "bob"])
    approvals_notify(now=timezone.now())
    message = SlackMessage.objects.get()
    message_send(message_id=message.pk)
    SlackLink.objects.all().delete()
    approval_decide(
        approval_id=approval.pk,
        reviewer=personas.bob,
        verdict="reject",
        checkpoint_id=approval.checkpoint_id,
        reason="secret reason",
    )
    assert message_send(message_id=message.pk) == "updated"
    redrawn = str(slack.of("chat.update")[-1].params)
    assert "no longer yours to see" in redrawn and "secret reason" not in redrawn and "bob" not in redrawn


def test_an_update_slack_keeps_refusing_is_given_up_and_shown_to_admins(
    slack, interrupted_run, personas, settings
):
    settings.DESK_SLACK_ATTEMPTS = 2
    approval, message = posted_then_approved(interrupted_run, personas)
    slack.mode = "error"
    assert message_send(message_id=message.pk) == "retry"
    assert message_send(message_id=message.pk) == "failed"
    message.refresh_from_db()
    assert not message.stale and message.last_error.startswith("update gave up")
    assert delivery_rows(approval)[0]["state"] == "update failed"
    assert slack_sweep() == {"due": 0}  # not tried forever


def test_announcing_an_item_again_does_not_post_it_to_a_channel_twice(slack, interrupted_run, personas):
    SlackChannel.objects.create(group=None, channel_id="COPEN")
    _run, approval = interrupted_run()
    approvals_notify(now=timezone.now())
    SLACK_CHANNEL.announced(approval, timezone.now())  # an escalation or a hand-over
    assert SlackMessage.objects.filter(kind=MessageKind.CHANNEL).count() == 1


def test_a_reader_unlinked_between_asking_and_sending_is_mailed(slack, interrupted_run, personas, mailoutbox):
    link(personas.alice, "UALICE")
    _run, approval = interrupted_run(reviewers=["alice"])
    SlackLink.objects.all().delete()
    assert SLACK_CHANNEL.send_item(approval, personas.alice, "created", timezone.now()) is False
