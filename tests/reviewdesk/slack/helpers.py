"""Requests as Slack sends them, to this process's Django (the test client: in-process)."""

from __future__ import annotations

import json

from django.core import mail
from django.test import Client

from reviewdesk.slack.linking import link_code_create
from reviewdesk.slack.models import SlackLink
from tests.slack_stand_in import TEAM, command_body, interaction_body, signed_headers


def as_meta(headers: dict[str, str]) -> dict[str, str]:
    return {f"HTTP_{k.upper().replace('-', '_')}": v for k, v in headers.items()}


def slack_post(path: str, body: bytes, headers: dict[str, str] | None = None):
    headers = signed_headers(body) if headers is None else headers
    return Client().post(path, body, content_type="application/x-www-form-urlencoded", **as_meta(headers))


def interact(payload: dict):
    return slack_post("/slack/interactions", interaction_body(payload))


def link(user, slack_user: str, team: str = TEAM) -> SlackLink:
    """Link `user` as a reviewer would: a code from the desk, sent from Slack."""
    code = link_code_create(user=user)
    answer = slack_post("/slack/commands", command_body(f"link {code}", user=slack_user, team=team))
    assert answer.status_code == 200 and "Linked" in answer.json()["text"], answer.content
    assert mail.outbox and "A Slack user was linked" in mail.outbox[-1].subject
    mail.outbox.pop()  # the owner's notice of the link (test_linking.py): the tests count the rest
    return SlackLink.objects.get(user=user)


def buttons(blocks: list[dict]) -> dict[str, dict]:
    """The message's buttons by action id (of its first item)."""
    for block in blocks:
        if block["type"] == "actions":
            return {e["action_id"]: e for e in block["elements"]}
    return {}


def value_of(approval) -> str:
    return json.dumps({"approval": str(approval.pk), "checkpoint": str(approval.checkpoint_id)})
