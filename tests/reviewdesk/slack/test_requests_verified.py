"""Requests to /slack/*: only Slack's, fresh and new, are read (in-process: the test client,
the real database; the Slack stand-in answers the SDK over HTTP)."""

from __future__ import annotations

import time

import pytest

from reviewdesk.approvals.models import ApprovalStatus
from reviewdesk.slack.models import SlackRequestSeen
from reviewdesk.slack.verify import seen_prune
from tests.reviewdesk.slack.helpers import link, slack_post, value_of
from tests.slack_stand_in import click, interaction_body, signed_headers

pytestmark = pytest.mark.django_db


@pytest.fixture
def pending(slack, interrupted_run, personas):
    link(personas.alice, "UALICE")
    _run, approval = interrupted_run(reviewers=["alice"])
    return approval


def approve_body(approval) -> bytes:
    return interaction_body(click("desk_approve", value_of(approval), user="UALICE"))


def assert_still_pending(approval) -> None:
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING


def test_a_good_request_decides_and_the_same_request_again_is_a_replay_refused(pending):
    body = approve_body(pending)
    headers = signed_headers(body)
    assert slack_post("/slack/interactions", body, headers).status_code == 200
    pending.refresh_from_db()
    assert pending.status == ApprovalStatus.APPROVED

    again = slack_post("/slack/interactions", body, headers)
    assert (again.status_code, again.content) == (401, b"refused: replayed")


def test_a_replay_of_a_refused_click_is_refused_before_anything_reads_it(pending, slack):
    """A click with a stale checkpoint is refused; sent again, it is not even read."""
    body = interaction_body(
        click("desk_approve", value_of(pending).replace(str(pending.checkpoint_id), "x"), user="UALICE")
    )
    headers = signed_headers(body)
    assert slack_post("/slack/interactions", body, headers).status_code == 200
    told = len(slack.of("chat.postEphemeral"))
    assert slack_post("/slack/interactions", body, headers).status_code == 401
    assert len(slack.of("chat.postEphemeral")) == told
    assert_still_pending(pending)


@pytest.mark.parametrize(
    "headers, reason",
    [
        (lambda body: signed_headers(body, secret="not-the-secret"), b"bad signature"),
        (lambda body: signed_headers(body + b"&x=1"), b"bad signature"),  # signed another body
        (lambda body: signed_headers(body, at=int(time.time()) - 301), b"stale timestamp"),
        (lambda body: signed_headers(body, at=int(time.time()) + 301), b"stale timestamp"),
        (lambda body: {**signed_headers(body), "X-Slack-Request-Timestamp": "12e3"}, b"unsigned"),
        (lambda body: {"X-Slack-Request-Timestamp": str(int(time.time()))}, b"unsigned"),
        (lambda body: {}, b"unsigned"),
    ],
    ids=["wrong secret", "other body", "old", "future", "not a number", "no signature", "no headers"],
)
def test_a_request_not_signed_by_slack_now_is_refused_and_decides_nothing(pending, headers, reason):
    body = approve_body(pending)
    seen = SlackRequestSeen.objects.count()
    answer = slack_post("/slack/interactions", body, headers(body))
    assert (answer.status_code, answer.content) == (401, b"refused: " + reason)
    assert_still_pending(pending)
    assert SlackRequestSeen.objects.count() == seen  # a refused request spends nothing


def test_a_request_within_the_window_is_taken(pending):
    body = approve_body(pending)
    assert (
        slack_post("/slack/interactions", body, signed_headers(body, at=int(time.time()) - 290)).status_code
        == 200
    )
    pending.refresh_from_db()
    assert pending.status == ApprovalStatus.APPROVED


def test_with_slack_off_every_request_is_refused(pending, settings):
    settings.SLACK_SIGNING_SECRET = ""
    answer = slack_post("/slack/interactions", approve_body(pending))
    assert (answer.status_code, answer.content) == (401, b"refused: Slack is not configured on this desk")
    assert_still_pending(pending)


def test_only_post_is_served(slack, client):
    assert client.get("/slack/interactions").status_code == 405


def test_signatures_older_than_twice_the_window_are_forgotten(pending):
    from datetime import timedelta

    from django.utils import timezone

    body = approve_body(pending)
    slack_post("/slack/interactions", body)
    SlackRequestSeen.objects.update(seen_at=timezone.now() - timedelta(seconds=601))
    assert seen_prune() == 2 and not SlackRequestSeen.objects.exists()  # the link command and the click
    # A request that old fails the timestamp check anyway.
    assert (
        slack_post("/slack/interactions", body, signed_headers(body, at=int(time.time()) - 601)).status_code
        == 401
    )


def test_a_shorter_window_set_by_the_operator_is_kept(pending, settings):
    """Slack's SDK refuses past five minutes by itself; the desk's own window may be shorter."""
    settings.DESK_SLACK_REQUEST_MAX_AGE_SECONDS = 60
    body = approve_body(pending)
    answer = slack_post("/slack/interactions", body, signed_headers(body, at=int(time.time()) - 120))
    assert (answer.status_code, answer.content) == (401, b"refused: stale timestamp")
    assert_still_pending(pending)
