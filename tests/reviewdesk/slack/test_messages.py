"""What a Slack message says (in-process: the blocks drawn from a real item in the database)."""

from __future__ import annotations

import json

import pytest

from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.approvals.models import ApprovalRequest
from reviewdesk.slack.blocks import message_blocks
from reviewdesk.slack.models import MessageKind, SlackMessage, SlackMessageItem
from tests.reviewdesk.approvals.conftest import EXECUTE_SCRIPT
from tests.reviewdesk.slack.helpers import buttons

pytestmark = pytest.mark.django_db


def email_script(**arguments) -> list[dict]:
    return [{"tool_calls": [{"name": "send_email", "arguments": arguments}]}, {"content": "ok"}]


def mrkdwn_texts(blocks) -> list[str]:
    """Every text Slack would read as mrkdwn (where `<!channel>` pings and `<url|x>` links)."""
    found = []

    def walk(node):
        if isinstance(node, dict):
            if node.get("type") == "mrkdwn":
                found.append(node["text"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(blocks)
    return found


def test_what_the_agent_wrote_is_plain_text_and_cannot_ping_or_link(slack, interrupted_run):
    _run, approval = interrupted_run(
        script=email_script(
            to="ada@example.com", subject="<!channel> *urgent* <https://evil.test|your bank>", body="hi"
        )
    )
    _text, blocks = message_blocks([approval], digest=False)
    assert "<!channel>" in json.dumps(blocks)  # shown, as text
    assert not any("<!channel>" in t or "evil.test" in t for t in mrkdwn_texts(blocks))


def test_an_unusual_call_asks_before_approving_and_names_why(slack, interrupted_run):
    _run, approval = interrupted_run(
        script=email_script(to="ada@example.com", subject="Refund\u202e", body="hi")
    )
    _text, blocks = message_blocks([approval], digest=False)
    confirm = buttons(blocks)["desk_approve"]["confirm"]
    assert "invisible characters" in confirm["text"]["text"]


def test_a_plain_call_approves_without_a_dialog(slack, interrupted_run):
    _run, approval = interrupted_run(
        script=email_script(to="ada@example.com", subject="Your refund", body="hi")
    )
    _text, blocks = message_blocks([approval], digest=False)
    assert "confirm" not in buttons(blocks)["desk_approve"]


def test_a_quorum_vote_shows_the_count_and_keeps_the_buttons(slack, interrupted_run, personas):
    _run, approval = interrupted_run(script=EXECUTE_SCRIPT)
    approval_decide(
        approval_id=approval.pk,
        reviewer=personas.alice,
        verdict="approve",
        checkpoint_id=approval.checkpoint_id,
    )
    approval = ApprovalRequest.objects.get(pk=approval.pk)
    _text, blocks = message_blocks([approval], digest=False)
    assert "1 of 2 approvals (alice)" in json.dumps(blocks)
    assert "desk_approve" in buttons(blocks)


def test_the_item_page_shows_admins_each_slack_message_and_its_state(
    slack, interrupted_run, personas, client
):
    _run, approval = interrupted_run(reviewers=["alice"])
    message = SlackMessage.objects.create(
        kind=MessageKind.ITEM,
        user=personas.alice,
        target="UALICE",
        state="emailed",
        attempts=5,
        last_error="ConnectionRefusedError: refused",
        due_at=approval.created_at,
    )
    SlackMessageItem.objects.create(message=message, request=approval)
    client.force_login(personas.admin)
    page = client.get(f"/approvals/{approval.pk}/").content.decode()
    assert (
        'id="slack-deliveries"' in page
        and "Slack failed; mailed instead" in page
        and "ConnectionRefusedError" in page
    )
    client.force_login(personas.alice)
    assert 'id="slack-deliveries"' not in client.get(f"/approvals/{approval.pk}/").content.decode()


def test_a_name_a_framework_chose_is_escaped_in_the_notification_text_too(slack, interrupted_run):
    """An external run's tool and agent names are the submitter's words: the text Slack shows in
    a notification (mrkdwn) must not ping or link either."""
    _run, approval = interrupted_run()
    approval.tool = "<!channel> <https://evil.test|Open on the desk>"
    text, blocks = message_blocks([approval], digest=False)
    assert "<" not in text and "&lt;!channel&gt;" in text
    assert not any("<!channel>" in t for t in mrkdwn_texts(blocks))


def test_a_tool_that_needs_a_device_key_has_no_approve_button_and_says_why(slack, interrupted_run, settings):
    settings.DESK_REQUIRE_DEVICE_KEYS = True
    _run, approval = interrupted_run()
    _text, blocks = message_blocks([approval], digest=False)
    assert set(buttons(blocks)) == {"desk_reject", "desk_open"}
    assert "needs your device key" in json.dumps(blocks)
