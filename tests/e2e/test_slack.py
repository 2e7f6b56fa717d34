"""Slack as a place to decide, on real processes: daphne, a Celery worker and beat on the test
database and Redis, the Slack stand-in (tests/slack_stand_in.py) as the Web API the worker and
daphne call, and requests signed as Slack signs them sent over HTTP to daphne.

A reviewer links their Slack user as on the desk (a one-time code, sent back as a signed
`/desk link CODE`); beat's approvals.tick announces an item and the worker posts it to them;
a signed click on its buttons decides as the desk does; every change redraws the message."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid

import pytest

from reviewdesk.accounts.models import NotificationPreference, NotifyMode
from reviewdesk.accounts.roles import REVIEWERS, SUBMITTERS
from reviewdesk.accounts.services import token_create
from reviewdesk.approvals.models import ApprovalRequest, Decision
from reviewdesk.audit.models import AuditEvent
from reviewdesk.slack.linking import link_code_create
from reviewdesk.slack.models import SlackChannel, SlackLink, SlackMessage, SlackRequestSeen
from tests.conftest import make_user
from tests.e2e.conftest import get_run, http, start_stack, wait_for_run, wait_until
from tests.slack_stand_in import (
    BOT_TOKEN,
    SIGNING_SECRET,
    TEAM,
    SlackStandIn,
    click,
    command_body,
    interaction_body,
    reject_submission,
    signed_headers,
)

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

APPROVE, REJECT = "desk_approve", "desk_reject"
ATTEMPTS = 4  # a post is tried at 0, +1, +2, +4 s (backoff 1 s, doubling), then its reviewer is mailed


@pytest.fixture(scope="module")
def slack() -> SlackStandIn:
    server = SlackStandIn()
    server.up()
    yield server
    server.down()


@pytest.fixture(scope="module")
def outbox(tmp_path_factory):
    return tmp_path_factory.mktemp("slack-outbox")


@pytest.fixture(scope="module")
def slack_stack(django_db_setup, django_db_blocker, redis_server, slack, outbox, tmp_path_factory):
    logs = tmp_path_factory.mktemp("slack-logs")
    stack = start_stack(
        logs,
        beat=True,
        env_extra={
            "DESK_CELERY_QUEUE": f"slack-{logs.name}-{uuid.uuid4().hex[:8]}",
            "DESK_AGENTS": "agents.demo,tests.e2e.slack_agent",
            "SLACK_BOT_TOKEN": BOT_TOKEN,
            "SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "SLACK_API_URL": slack.url,
            "DESK_NOTIFY_EMAIL": "1",
            "DESK_APPROVAL_TICK_SECONDS": "1",
            "DESK_NOTIFY_DIGEST_TICK_SECONDS": "1",
            "DESK_SLACK_SWEEP_SECONDS": "1",
            "DESK_SLACK_BACKOFF_SECONDS": "1",
            "DESK_SLACK_ATTEMPTS": str(ATTEMPTS),
            "DESK_SLACK_TIMEOUT_SECONDS": "3",
            "EMAIL_BACKEND": "django.core.mail.backends.filebased.EmailBackend",
            "EMAIL_FILE_PATH": str(outbox),
        },
    )
    yield stack
    stack.stop()


@pytest.fixture
def people(personas):
    """Submitters' and reviewers' tokens; sam submits and reviews too (four eyes keeps him off
    his own runs)."""
    sam = make_user("sam", SUBMITTERS, REVIEWERS)
    return {
        "carol": token_create(user=personas.carol, scopes=["submit"])[1],
        "alice": token_create(user=personas.alice, scopes=["review"])[1],
        "sam": token_create(user=sam, scopes=["submit", "review"])[1],
        "sam_user": sam,
    }


@pytest.fixture(autouse=True)
def fresh_stand_in(slack):
    slack.mode = "ok"
    with slack.lock:
        slack.calls.clear()
    yield
    slack.mode = "ok"
    if slack._server is None:
        slack.up()


# --- talking to daphne as Slack does ----------------------------------------------------------


def post_signed(stack, path: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, str]:
    """POST a form body to daphne as Slack does: signed now, unless `headers` say otherwise."""
    request = urllib.request.Request(stack.url + path, data=body, method="POST")
    request.add_header("Content-Type", "application/x-www-form-urlencoded")
    for name, value in (headers if headers is not None else signed_headers(body)).items():
        request.add_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def send_interaction(stack, payload: dict) -> tuple[int, str]:
    return post_signed(stack, "/slack/interactions", interaction_body(payload))


def link(stack, user, *, mode: str = NotifyMode.EVERY) -> str:
    """Link `user` to a new Slack user as a person does (a code shown on the desk, sent back with
    `/desk link CODE`), who then hears as `mode` says (every: each item a message at once). The
    Slack user id."""
    slack_user = "U" + uuid.uuid4().hex[:10].upper()
    code = link_code_create(user=user)
    status, text = post_signed(stack, "/slack/commands", command_body(f"link {code}", user=slack_user))
    assert status == 200, text
    assert "Linked" in json.loads(text)["text"], text
    assert SlackLink.objects.get(user=user).slack_user_id == slack_user
    NotificationPreference.objects.update_or_create(user=user, defaults={"mode": mode})
    return slack_user


def submit(stack, token: str, script: list[dict], *, agent: str = "demo") -> dict:
    status, run = http(
        "POST",
        stack.url + "/api/v1/runs",
        token=token,
        body={"agent": agent, "input": "slack", "model": {"provider": "scripted", "script": script}},
    )
    assert status == 201, run
    return wait_for_run(stack, token, run["id"], "input_required", timeout=30)


def email_script(subject: str) -> list[dict]:
    arguments = {"to": "ada@example.com", "subject": subject, "body": "hello"}
    return [{"tool_calls": [{"name": "send_email", "arguments": arguments}]}, {"content": "done"}]


EXECUTE_SCRIPT = [
    {"tool_calls": [{"name": "execute", "arguments": {"command": "echo four-eyes-in-slack"}}]},
    {"content": "ran it"},
]


def blocks_of(call) -> list[dict]:
    blocks = call.params.get("blocks") or []
    return json.loads(blocks) if isinstance(blocks, str) else blocks


def posted_to(slack: SlackStandIn, slack_user: str, timeout: float = 20):
    """The one chat.postMessage to `slack_user` (a DM), once it came."""
    calls = wait_until(
        lambda: [c for c in slack.of("chat.postMessage") if c.params.get("channel") == slack_user],
        timeout=timeout,
        what=f"a message posted to {slack_user}",
        interval=0.1,
    )
    assert len(calls) == 1, [c.params for c in calls]
    assert calls[0].token == BOT_TOKEN
    return calls[0]


def buttons(call) -> dict[str, dict]:
    """action_id -> button, of the message's actions blocks."""
    return {
        element.get("action_id"): element
        for block in blocks_of(call)
        if block["type"] == "actions"
        for element in block["elements"]
    }


def text_of(call) -> str:
    return json.dumps(blocks_of(call), ensure_ascii=False)


def updates_of(slack: SlackStandIn, message: SlackMessage) -> list:
    return [
        c
        for c in slack.of("chat.update")
        if c.params.get("channel") == message.channel and c.params.get("ts") == message.ts
    ]


def last_update(slack: SlackStandIn, message: SlackMessage, containing: str, timeout: float = 20):
    """The latest chat.update of `message`, once one says `containing`."""

    def found():
        calls = updates_of(slack, message)
        return calls and containing in text_of(calls[-1]) and calls[-1]

    return wait_until(found, timeout=timeout, what=f"an update saying {containing!r}", interval=0.1)


def ephemerals_to(slack: SlackStandIn, slack_user: str, timeout: float = 10) -> list[str]:
    return wait_until(
        lambda: [
            c.params["text"] for c in slack.of("chat.postEphemeral") if c.params.get("user") == slack_user
        ],
        timeout=timeout,
        what=f"an ephemeral reply to {slack_user}",
        interval=0.1,
    )


def message_for(user) -> SlackMessage:
    return wait_until(
        lambda: SlackMessage.objects.filter(user=user, state="sent").first(),
        timeout=20,
        what=f"{user}'s message marked sent",
    )


# --- the tests ----------------------------------------------------------------------------------


def test_approve_in_slack_runs_the_tool_audits_where_it_was_clicked_and_redraws_the_message(
    slack_stack, slack, personas, people
):
    alice = personas.alice
    alice_slack = link(slack_stack, alice)
    run = submit(slack_stack, people["carol"], email_script("approved in slack"))
    [approval] = run["approvals"]

    posted = posted_to(slack, alice_slack)
    assert "send_email" in posted.params["text"]
    approve = buttons(posted)[APPROVE]
    assert json.loads(approve["value"]) == {
        "approval": approval["id"],
        "checkpoint": approval["checkpoint_id"],
    }
    assert REJECT in buttons(posted)
    message = message_for(alice)
    assert message.channel == "D" + alice_slack[1:]  # the DM Slack answered with, which updates name

    status, _ = send_interaction(slack_stack, click(APPROVE, approve["value"], user=alice_slack))
    assert status == 200

    final = wait_for_run(slack_stack, people["carol"], run["id"], timeout=30)
    assert final["status"] == "succeeded", final["error"]
    [effect] = final["side_effects"]
    assert (effect["tool"], effect["status"], effect["result"]["sent"]) == ("send_email", "confirmed", True)
    [decided] = final["approvals"]
    assert decided["status"] == "approved" and decided["decision"]["reviewer"] == "alice"

    [audit] = AuditEvent.objects.filter(action="decision.approve", subject_id=approval["id"])
    assert audit.actor_name == "alice"
    link_row = SlackLink.objects.get(user=alice)
    assert audit.data["via"] == {
        "channel": "slack",
        "slack_team": TEAM,
        "slack_user": alice_slack,
        "link": link_row.pk,
    }
    assert any(t.startswith("Approved send_email") for t in ephemerals_to(slack, alice_slack))

    update = last_update(slack, message, "Approved by alice")
    assert buttons(update) == {}  # no actions block: nothing left to click
    assert any(b.get("block_id") == f"outcome:{approval['id']}" for b in blocks_of(update))


def test_reject_in_slack_opens_the_reason_dialog_and_the_run_goes_on_without_the_tool(
    slack_stack, slack, personas, people
):
    alice = personas.alice
    alice_slack = link(slack_stack, alice)
    run = submit(slack_stack, people["carol"], email_script("rejected in slack"))
    [approval] = run["approvals"]
    value = buttons(posted_to(slack, alice_slack))[REJECT]["value"]

    reject = click(REJECT, value, user=alice_slack)
    status, _ = send_interaction(slack_stack, reject)
    assert status == 200
    [opened] = wait_until(lambda: slack.of("views.open"), timeout=10, what="the reject dialog")
    view = opened.params["view"]
    view = json.loads(view) if isinstance(view, str) else view
    assert opened.params["trigger_id"] == reject["trigger_id"]
    assert (view["callback_id"], view["private_metadata"]) == ("desk_reject_reason", value)
    assert (
        ApprovalRequest.objects.get(pk=approval["id"]).status == "pending"
    )  # the click alone decides nothing

    status, text = send_interaction(
        slack_stack, reject_submission(value, "Ada asked for no more emails", user=alice_slack)
    )
    assert (status, json.loads(text)) == (200, {"response_action": "clear"})

    final = wait_for_run(slack_stack, people["carol"], run["id"], timeout=30)
    assert final["status"] == "succeeded", final["error"]
    assert final["side_effects"] == []  # the tool never ran
    [decided] = final["approvals"]
    assert decided["status"] == "rejected"
    [decision] = Decision.objects.filter(request_id=approval["id"])
    assert (decision.verdict, decision.reason, decision.reviewer_id) == (
        "reject",
        "Ada asked for no more emails",
        alice.pk,
    )
    [audit] = AuditEvent.objects.filter(action="decision.reject", subject_id=approval["id"])
    assert audit.data["via"]["slack_user"] == alice_slack
    last_update(slack, message_for(alice), "Ada asked for no more emails")


def test_a_click_by_an_unlinked_slack_user_decides_nothing_and_says_how_to_link(
    slack_stack, slack, personas, people
):
    alice_slack = link(slack_stack, personas.alice)
    run = submit(slack_stack, people["carol"], email_script("unlinked click"))
    [approval] = run["approvals"]
    value = buttons(posted_to(slack, alice_slack))[APPROVE]["value"]

    stranger = "U" + uuid.uuid4().hex[:10].upper()
    status, _ = send_interaction(slack_stack, click(APPROVE, value, user=stranger))

    assert status == 200
    [told] = ephemerals_to(slack, stranger)
    assert "not linked" in told and "/desk link CODE" in told
    assert not Decision.objects.filter(request_id=approval["id"]).exists()
    assert get_run(slack_stack, people["carol"], run["id"])["approvals"][0]["status"] == "pending"


def test_the_runs_submitter_cannot_decide_it_from_slack(slack_stack, slack, personas, people):
    sam = people["sam_user"]
    sam_slack = link(slack_stack, sam)
    run = submit(slack_stack, people["sam"], email_script("sam's own run"))
    [approval] = run["approvals"]
    value = json.dumps({"approval": approval["id"], "checkpoint": approval["checkpoint_id"]})

    status, _ = send_interaction(slack_stack, click(APPROVE, value, user=sam_slack))

    assert status == 200
    [told] = ephemerals_to(slack, sam_slack)
    assert told.startswith("Not decided: you submitted this run"), told
    # Nor by rejecting: the dialog's submission is refused in the dialog.
    status, text = send_interaction(slack_stack, reject_submission(value, "my own run", user=sam_slack))
    assert status == 200
    answer = json.loads(text)
    assert answer["response_action"] == "errors"
    assert "you submitted this run" in answer["errors"]["reason"], answer
    assert not Decision.objects.filter(request_id=approval["id"]).exists()
    assert not AuditEvent.objects.filter(action__startswith="decision.", subject_id=approval["id"]).exists()
    assert get_run(slack_stack, people["sam"], run["id"])["approvals"][0]["status"] == "pending"


def test_a_replayed_a_forged_and_an_old_request_are_refused_and_change_nothing(
    slack_stack, slack, personas, people
):
    alice_slack = link(slack_stack, personas.alice)
    run = submit(slack_stack, people["carol"], email_script("replays"))
    [approval] = run["approvals"]
    value = buttons(posted_to(slack, alice_slack))[APPROVE]["value"]
    seen_before = SlackRequestSeen.objects.count()

    # Forged: signed with another secret. Old: signed correctly, six minutes ago.
    body = interaction_body(click(APPROVE, value, user=alice_slack))
    forged = post_signed(
        slack_stack, "/slack/interactions", body, signed_headers(body, secret="not-the-secret")
    )
    assert forged[0] == 401 and "bad signature" in forged[1]
    old = post_signed(
        slack_stack, "/slack/interactions", body, signed_headers(body, at=int(time.time()) - 360)
    )
    assert old[0] == 401 and "stale timestamp" in old[1]
    assert not Decision.objects.filter(request_id=approval["id"]).exists()
    assert SlackRequestSeen.objects.count() == seen_before  # nothing refused was recorded

    # Replayed: the very request Slack sent, sent again. The first decides; the second is refused.
    reject_body = interaction_body(reject_submission(value, "first and only", user=alice_slack))
    headers = signed_headers(reject_body)
    first = post_signed(slack_stack, "/slack/interactions", reject_body, headers)
    assert first[0] == 200, first
    decisions = list(Decision.objects.filter(request_id=approval["id"]).values_list("pk", "verdict"))
    assert [v for _, v in decisions] == ["reject"]
    audits = AuditEvent.objects.filter(action__startswith="decision.", subject_id=approval["id"]).count()

    second = post_signed(slack_stack, "/slack/interactions", reject_body, headers)

    assert second[0] == 401 and "replayed" in second[1]
    assert list(Decision.objects.filter(request_id=approval["id"]).values_list("pk", "verdict")) == decisions
    assert (
        AuditEvent.objects.filter(action__startswith="decision.", subject_id=approval["id"]).count() == audits
    )
    # A replayed link command is refused as well: a code is spent once, the request seen once.
    code_body = command_body("help", user=alice_slack)
    code_headers = signed_headers(code_body)
    assert post_signed(slack_stack, "/slack/commands", code_body, code_headers)[0] == 200
    assert post_signed(slack_stack, "/slack/commands", code_body, code_headers)[0] == 401


def test_a_device_key_tool_offers_no_approve_button_and_a_crafted_approve_is_refused(
    slack_stack, slack, personas, people
):
    alice = personas.alice
    alice_slack = link(slack_stack, alice)
    run = submit(slack_stack, people["carol"], email_script("needs a device key"), agent="demo-keys")
    [approval] = run["approvals"]

    posted = posted_to(slack, alice_slack)
    assert APPROVE not in buttons(posted)
    assert REJECT in buttons(posted)  # a rejection runs nothing: it may be made here
    assert "needs your device key" in text_of(posted)

    value = json.dumps({"approval": approval["id"], "checkpoint": approval["checkpoint_id"]})
    status, _ = send_interaction(slack_stack, click(APPROVE, value, user=alice_slack))

    assert status == 200
    [told] = ephemerals_to(slack, alice_slack)
    assert told.startswith("Not decided:") and "device key" in told, told
    assert f"/approvals/{approval['id']}/" in told  # where to approve it instead
    assert not Decision.objects.filter(request_id=approval["id"]).exists()
    assert get_run(slack_stack, people["carol"], run["id"])["status"] == "input_required"


def test_a_quorum_of_two_is_met_by_two_clicks_in_slack(slack_stack, slack, personas, people):
    alice, bob = personas.alice, personas.bob
    alice_slack, bob_slack = link(slack_stack, alice), link(slack_stack, bob)
    run = submit(slack_stack, people["carol"], EXECUTE_SCRIPT)
    [approval] = run["approvals"]
    assert approval["quorum"]["required"] == 2
    to_alice, to_bob = posted_to(slack, alice_slack), posted_to(slack, bob_slack)
    assert "0 of 2 approvals" in text_of(to_alice)
    bobs_message = message_for(bob)

    status, _ = send_interaction(
        slack_stack, click(APPROVE, buttons(to_alice)[APPROVE]["value"], user=alice_slack)
    )

    assert status == 200
    [told] = ephemerals_to(slack, alice_slack)
    assert "1 of 2, waiting for another reviewer" in told, told
    assert ApprovalRequest.objects.get(pk=approval["id"]).status == "pending"
    # bob's message is redrawn with alice's vote, its buttons still there (his is the last vote).
    redrawn = last_update(slack, bobs_message, "1 of 2 approvals (alice)")
    assert APPROVE in buttons(redrawn)
    assert get_run(slack_stack, people["carol"], run["id"])["side_effects"] == []

    status, _ = send_interaction(
        slack_stack, click(APPROVE, buttons(to_bob)[APPROVE]["value"], user=bob_slack)
    )

    assert status == 200
    final = wait_for_run(slack_stack, people["carol"], run["id"], timeout=40)
    assert final["status"] == "succeeded", final["error"]
    [effect] = final["side_effects"]
    assert (effect["tool"], effect["status"], effect["result"]["stdout"]) == (
        "execute",
        "confirmed",
        "four-eyes-in-slack\n",
    )
    assert final["approvals"][0]["quorum"]["approved_by"] == ["alice", "bob"]
    vias = [
        a.data["via"]["slack_user"]
        for a in AuditEvent.objects.filter(action="decision.approve", subject_id=approval["id"]).order_by(
            "id"
        )
    ]
    assert vias == [alice_slack, bob_slack]
    assert buttons(last_update(slack, bobs_message, "Approved by alice, bob")) == {}


def test_a_decision_on_the_desk_redraws_the_slack_message_without_buttons(
    slack_stack, slack, personas, people
):
    bob = personas.bob
    bob_slack = link(slack_stack, bob)
    run = submit(slack_stack, people["carol"], email_script("decided on the desk"))
    [approval] = run["approvals"]
    posted = posted_to(slack, bob_slack)
    assert APPROVE in buttons(posted)
    message = message_for(bob)

    status, body = http(
        "POST",
        f"{slack_stack.url}/api/v1/approvals/{approval['id']}/decision",
        token=people["alice"],
        body={"verdict": "approve", "checkpoint_id": approval["checkpoint_id"]},
    )
    assert status == 201, body

    update = last_update(slack, message, "Approved by alice")
    assert buttons(update) == {}
    assert wait_for_run(slack_stack, people["carol"], run["id"], timeout=30)["status"] == "succeeded"
    [audit] = AuditEvent.objects.filter(action="decision.approve", subject_id=approval["id"])
    assert "via" not in audit.data  # decided on the desk's API, not in Slack
    # The redraw is done once the worker has written it so (after Slack took the update).
    wait_until(
        lambda: not SlackMessage.objects.get(pk=message.pk).stale, timeout=10, what="the message redrawn"
    )


def test_a_message_is_retried_while_slack_is_down_and_posted_once_when_it_is_up(
    slack_stack, slack, personas, people
):
    alice = personas.alice
    alice_slack = link(slack_stack, alice)
    slack.down()
    run = submit(slack_stack, people["carol"], email_script("slack down, then up"))

    retrying = wait_until(
        lambda: SlackMessage.objects.filter(user=alice, state="pending", attempts__gte=2).first(),
        timeout=20,
        what="the post to fail twice and wait to be tried again",
    )
    assert retrying.last_error, retrying
    slack.up()

    posted = posted_to(slack, alice_slack)
    message = message_for(alice)
    assert message.pk == retrying.pk and message.attempts >= 3 and message.last_error == ""
    assert buttons(posted)[APPROVE]["value"].find(run["approvals"][0]["id"]) > 0
    # Posted once: no late retry, nor the sweep, posts it again.
    time.sleep(3)
    assert len([c for c in slack.of("chat.postMessage") if c.params.get("channel") == alice_slack]) == 1
    assert (
        AuditEvent.objects.filter(action="notification.slack_sent", subject_id=str(message.pk)).count() == 1
    )


def test_a_message_slack_never_takes_is_mailed_to_its_reviewer_instead(
    slack_stack, slack, personas, people, outbox
):
    alice = personas.alice
    alice_slack = link(slack_stack, alice)
    slack.mode = "error"  # Slack answers 503 to every call
    run = submit(slack_stack, people["carol"], email_script("slack never answers"))
    [approval] = run["approvals"]

    # Given up: the last attempt claims the message (state "failed", so no other worker takes it),
    # mails, then records "emailed" and audits it. Wait for the audit row, written last.
    def given_up():
        found = SlackMessage.objects.filter(user=alice).first()
        if (
            found
            and AuditEvent.objects.filter(
                action="notification.slack_failed", subject_id=str(found.pk)
            ).exists()
        ):
            return SlackMessage.objects.get(pk=found.pk)  # read after the audit row: its final state
        return None

    message = wait_until(
        given_up,
        timeout=30,
        what="the post to be given up",
        interval=0.2,
    )

    assert (message.state, message.attempts) == ("emailed", ATTEMPTS)
    assert "service_unavailable" in message.last_error
    tried = [c for c in slack.of("chat.postMessage") if c.params.get("channel") == alice_slack]
    assert len(tried) == ATTEMPTS
    [failed] = AuditEvent.objects.filter(action="notification.slack_failed", subject_id=str(message.pk))
    assert failed.data["fallback"] == "email" and failed.data["approvals"] == [approval["id"]]
    [sent] = AuditEvent.objects.filter(
        action="notification.sent", subject_id=approval["id"], data__to="alice"
    )
    assert sent.data["occasion"] == "created"
    mails = [p.read_text(errors="replace") for p in outbox.iterdir()]
    assert any("alice@example.com" in m and "slack never answers" in m for m in mails), mails


def test_a_digest_in_slack_lists_each_item_with_its_buttons_and_a_click_redraws_only_that_one(
    slack_stack, slack, personas, people
):
    alice = personas.alice
    alice_slack = link(slack_stack, alice, mode=NotifyMode.OFF)  # quiet while both are announced
    runs = [submit(slack_stack, people["carol"], email_script(f"digest {n}")) for n in (1, 2)]
    ids = [r["approvals"][0]["id"] for r in runs]
    wait_until(
        lambda: ApprovalRequest.objects.filter(pk__in=ids, notified_at__isnull=False).count() == 2,
        timeout=20,
        what="both items announced",
    )
    NotificationPreference.objects.filter(user=alice).update(mode=NotifyMode.DIGEST, digest_sent_at=None)

    digest = posted_to(slack, alice_slack)
    assert digest.params["text"] == "2 items for your review (2 still waiting)"
    approves = [
        element["value"]
        for block in blocks_of(digest)
        if block["type"] == "actions"
        for element in block["elements"]
        if element["action_id"] == APPROVE
    ]
    assert [json.loads(v)["approval"] for v in approves] == ids  # oldest first, each with its buttons
    message = message_for(alice)
    assert message.kind == "digest"

    status, _ = send_interaction(slack_stack, click(APPROVE, approves[0], user=alice_slack))

    assert status == 200
    assert wait_for_run(slack_stack, people["carol"], runs[0]["id"], timeout=30)["status"] == "succeeded"
    update = last_update(slack, message, "Approved by alice")
    assert update.params["text"] == "2 items for your review (1 still waiting)"
    still = [b for b in blocks_of(update) if b["type"] == "actions"]
    assert [b["block_id"] for b in still] == [f"act:{ids[1]}"]  # the other item keeps its buttons
    assert ApprovalRequest.objects.get(pk=ids[1]).status == "pending"


def test_an_item_is_posted_to_the_reviewers_channel_and_a_click_there_decides_as_the_clicker(
    slack_stack, slack, personas, people
):
    SlackChannel.objects.create(group=None, channel_id="C0QUEUE")  # items open to every reviewer
    bob_slack = link(slack_stack, personas.bob, mode=NotifyMode.OFF)
    run = submit(slack_stack, people["carol"], email_script("posted to the channel"))

    posted = posted_to(slack, "C0QUEUE")
    message = wait_until(
        lambda: SlackMessage.objects.filter(kind="channel", state="sent").first(), timeout=10, what="sent"
    )
    assert (message.user, message.channel) == (None, "C0QUEUE")
    value = buttons(posted)[APPROVE]["value"]

    status, _ = send_interaction(slack_stack, click(APPROVE, value, user=bob_slack, channel="C0QUEUE"))

    assert status == 200
    final = wait_for_run(slack_stack, people["carol"], run["id"], timeout=30)
    assert final["status"] == "succeeded", final["error"]
    assert final["approvals"][0]["decision"]["reviewer"] == "bob"
    [told] = [c for c in slack.of("chat.postEphemeral") if c.params.get("user") == bob_slack]
    assert told.params["channel"] == "C0QUEUE"
    assert buttons(last_update(slack, message, "Approved by bob")) == {}


def test_a_full_digest_of_shell_commands_stays_within_slacks_fifty_blocks(
    slack_stack, slack, personas, people
):
    """Slack refuses a message of more than 50 blocks (the stand-in does not judge it): a digest
    lists as many items as fit, each with everything an item shows and its buttons, the rest
    wait for the next one. The largest item: a command (its first line is shown) with a note
    (bob approved it already: "yours is the last of 2 approvals")."""
    alice = personas.alice
    alice_slack = link(slack_stack, alice, mode=NotifyMode.OFF)
    bob = token_create(user=personas.bob, scopes=["review"])[1]
    runs = [submit(slack_stack, people["carol"], EXECUTE_SCRIPT) for _ in range(9)]
    ids = [r["approvals"][0]["id"] for r in runs]
    for run in runs:
        [approval] = run["approvals"]
        status, body = http(
            "POST",
            f"{slack_stack.url}/api/v1/approvals/{approval['id']}/decision",
            token=bob,
            body={"verdict": "approve", "checkpoint_id": approval["checkpoint_id"]},
        )
        assert status == 201, body
    wait_until(
        lambda: ApprovalRequest.objects.filter(pk__in=ids, notified_at__isnull=False).count() == len(ids),
        timeout=30,
        what="every item announced",
    )
    NotificationPreference.objects.filter(user=alice).update(mode=NotifyMode.DIGEST, digest_sent_at=None)

    digest = posted_to(slack, alice_slack)

    blocks = blocks_of(digest)
    assert "yours is the last of 2 approvals" in text_of(digest)
    assert len(blocks) <= 50, len(blocks)
    listed = [b["block_id"] for b in blocks if b["type"] == "actions"]
    assert listed == [f"act:{i}" for i in ids[: len(listed)]] and len(listed) >= 6
    assert "More wait on the desk" in text_of(digest)  # nine waited


def test_a_cancelled_run_redraws_its_message_and_an_old_button_decides_nothing(
    slack_stack, slack, personas, people
):
    alice = personas.alice
    alice_slack = link(slack_stack, alice)
    run = submit(slack_stack, people["carol"], email_script("cancelled meanwhile"))
    [approval] = run["approvals"]
    approve = buttons(posted_to(slack, alice_slack))[APPROVE]["value"]
    message = message_for(alice)

    status, body = http("POST", f"{slack_stack.url}/api/v1/runs/{run['id']}/cancel", token=people["carol"])
    assert status == 200, body

    assert buttons(last_update(slack, message, "Cancelled with its run")) == {}
    status, _ = send_interaction(slack_stack, click(APPROVE, approve, user=alice_slack))  # the old button
    assert status == 200
    [told] = ephemerals_to(slack, alice_slack)
    assert told.startswith("Not decided:"), told
    assert not Decision.objects.filter(request_id=approval["id"]).exists()
    assert ApprovalRequest.objects.get(pk=approval["id"]).status == "cancelled"
    assert get_run(slack_stack, people["carol"], run["id"])["side_effects"] == []
