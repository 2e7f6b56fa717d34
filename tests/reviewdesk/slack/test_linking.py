"""Linking a Slack user to a desk account: a code the desk shows, sent back from Slack
(in-process: the test client and the real database)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from reviewdesk.audit.models import AuditEvent
from reviewdesk.lib.errors import Conflict, Invalid
from reviewdesk.slack.linking import link_code_create, link_complete, link_of, link_remove
from reviewdesk.slack.models import SlackLink, SlackLinkCode
from tests.reviewdesk.slack.helpers import slack_post
from tests.slack_stand_in import command_body

pytestmark = pytest.mark.django_db


def send(code: str, user: str = "UALICE", team: str = "T0TEST") -> str:
    answer = slack_post("/slack/commands", command_body(f"link {code}", user=user, team=team))
    assert answer.status_code == 200
    assert answer.json()["response_type"] == "ephemeral"
    return answer.json()["text"]


def test_a_code_links_the_slack_user_who_sends_it_to_the_account_it_was_shown_to(slack, personas, mailoutbox):
    code = link_code_create(user=personas.alice)
    assert len(code) == 14 and code.count("-") == 2
    assert not SlackLinkCode.objects.filter(
        code_sha256__contains=code.replace("-", "")
    ).exists()  # kept hashed

    assert "desk account alice" in send(code.lower().replace("-", " - ").replace(" ", ""))

    found = link_of(team_id="T0TEST", slack_user_id="UALICE")
    assert found is not None and found.user == personas.alice and found.notify
    assert AuditEvent.objects.filter(action="slack.linked", actor=personas.alice).get().data == {
        "user": "alice",
        "slack_team": "T0TEST",
        "slack_user": "UALICE",
    }
    # A code seen over a shoulder and sent first would link the wrong person: the owner hears.
    (notice,) = mailoutbox
    assert notice.to == ["alice@example.com"] and "UALICE" in notice.body and "/settings/" in notice.body


def test_a_code_typed_with_spaces_links_too(slack, personas):
    code = link_code_create(user=personas.alice)
    assert "desk account alice" in send(code.replace("-", " "))


def test_a_workspace_not_allowed_is_refused(slack, personas, settings):
    settings.SLACK_TEAM_IDS = ["T0TEST"]
    code = link_code_create(user=personas.alice)
    assert "does not take requests from this workspace" in send(code, team="T0EVIL")
    assert not SlackLink.objects.exists()


def test_a_code_works_once(slack, personas):
    code = link_code_create(user=personas.alice)
    send(code)
    SlackLink.objects.all().delete()
    assert "used already" in send(code, user="UMALLORY")
    assert link_of(team_id="T0TEST", slack_user_id="UMALLORY") is None


def test_an_expired_a_replaced_or_an_unknown_code_links_nobody(slack, personas):
    old = link_code_create(user=personas.alice)
    new = link_code_create(user=personas.alice)
    assert "used already" in send(old)  # a new code retires the one before
    SlackLinkCode.objects.filter(used_at__isnull=True).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert "expired" in send(new)
    assert "not one the desk showed" in send("ABCD-EFGH-JKMN")
    assert not SlackLink.objects.exists()


def test_one_slack_user_links_one_account_and_one_account_one_slack_user(slack, personas):
    send(link_code_create(user=personas.alice), user="USHARED")
    assert "linked to another desk account" in send(link_code_create(user=personas.bob), user="USHARED")
    # Nor through another workspace's team id: a click's account never hangs on which it names.
    assert "linked to another desk account" in send(
        link_code_create(user=personas.bob), user="USHARED", team="T0OTHER"
    )
    with pytest.raises(Conflict):
        link_complete(code=link_code_create(user=personas.alice), team_id="T0TEST", slack_user_id="UOTHER")
    assert list(SlackLink.objects.values_list("user__username", "slack_user_id")) == [("alice", "USHARED")]


def test_a_bad_code_is_refused_with_a_reason(slack, personas):
    with pytest.raises(Invalid):
        link_complete(code="", team_id="T0TEST", slack_user_id="U1")


def test_help_says_who_you_are_and_how_to_link(slack, personas):
    answer = slack_post("/slack/commands", command_body("", user="UALICE")).json()["text"]
    assert "not linked" in answer and "/desk link CODE" in answer
    send(link_code_create(user=personas.alice))
    answer = slack_post("/slack/commands", command_body("help", user="UALICE")).json()["text"]
    assert "linked to desk account alice" in answer


def test_removing_a_link_is_audited_with_who_removed_it(slack, personas):
    send(link_code_create(user=personas.alice))
    link_remove(link=SlackLink.objects.get(), by=personas.admin, via="admin")
    assert not SlackLink.objects.exists()
    row = AuditEvent.objects.get(action="slack.unlinked")
    assert row.actor == personas.admin and row.data["slack_user"] == "UALICE" and row.data["via"] == "admin"


def test_the_admin_sees_links_and_removes_them_through_the_audited_service(slack, personas, client):
    send(link_code_create(user=personas.alice))
    client.force_login(personas.admin)
    page = client.get("/admin/slack/slacklink/")
    assert page.status_code == 200 and b"UALICE" in page.content
    link = SlackLink.objects.get()
    answer = client.post(
        "/admin/slack/slacklink/", {"action": "remove_links", "_selected_action": [link.pk]}, follow=True
    )
    assert answer.status_code == 200
    assert not SlackLink.objects.exists()
    assert AuditEvent.objects.get(action="slack.unlinked").actor == personas.admin


def test_a_reviewer_cannot_reach_the_admins_link_list(slack, personas, client):
    client.force_login(personas.alice)
    assert client.get("/admin/slack/slacklink/").status_code == 302
