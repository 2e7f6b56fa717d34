"""A hand-over's note on the run's feeds, read by each persona through the API.

The desk socket leaves the note out for reviewers the call no longer reaches
(`approvals.reads.representation.message_for`); the run's feeds (`GET /api/v1/runs/{id}`, `GET /api/v1/runs`,
`GET /api/v1/runs/{id}/events`, the SSE streams `GET /api/v1/runs/{id}/stream` and
`GET /api/v1/stream`) follow the same rule: the note is shown to the users the call's targets
name now, to admins and to the reviewer who wrote it; to anyone else who may see the run it is
blank. Two runs: one open to every reviewer (every reviewer may read it), and one whose calls
were routed to group finance (its members may read it through the call still theirs).

The streams are driven in-process (`reviewdesk.asgi.application` with ASGI messages, no server),
from the start (`after=0`), so they replay the hand-over's event from the table.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from asgiref.sync import async_to_sync
from rest_framework.test import APIClient

from reviewdesk.accounts.roles import REVIEWERS
from reviewdesk.accounts.services import token_create
from reviewdesk.approvals.lifecycle.handover import approval_handover
from tests.conftest import make_user
from tests.reviewdesk.api.sse import StreamCall

# The streams read through database_sync_to_async, on threads of their own.
pytestmark = pytest.mark.django_db(transaction=True)

NOTE = "her account is frozen, check with legal first"


def two_refunds(amount: float) -> list[dict]:
    """One model turn asking two refunds at once: over 1,000 the demo routes each to finance."""
    return [
        {
            "tool_calls": [
                {"name": "refund_payment", "arguments": {"order_id": "A-1001", "amount": amount}},
                {"name": "refund_payment", "arguments": {"order_id": "A-1002", "amount": amount}},
            ]
        },
        {"content": "Done."},
    ]


def bearer(user) -> str:
    _, raw = token_create(user=user, scopes=("submit", "review", "audit"))
    return raw


def client_with(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def streamed(raw: str, path: str) -> list[dict]:
    """The messages (`data:` lines) an SSE stream at `path` sent from the start within 0.6 s."""
    call = StreamCall(path, [(b"authorization", f"Bearer {raw}".encode())], query=b"after=0")

    async def main():
        task = call.start()
        await asyncio.wait({task}, timeout=0.6)
        task.cancel()

    async_to_sync(main)()
    assert call.status == 200, call.sent
    body = call.body().decode()
    return [json.loads(line[len("data: ") :]) for line in body.splitlines() if line.startswith("data: {")]


def notes_on_every_feed(raw: str, run_id, approval_id) -> dict[str, list[str]]:
    """The hand-over notes of `approval_id` each feed gave this token's user, by feed."""
    client = client_with(raw)
    detail = client.get(f"/api/v1/runs/{run_id}")
    assert detail.status_code == 200, detail.json()
    listed = client.get("/api/v1/runs")
    assert listed.status_code == 200, listed.json()
    [run_listed] = [r for r in listed.json()["results"] if r["id"] == str(run_id)]
    events = client.get(f"/api/v1/runs/{run_id}/events")
    assert events.status_code == 200, events.json()

    def of_approvals(approvals) -> list[str]:
        return [a["handover"]["note"] for a in approvals if a["id"] == str(approval_id) and a["handover"]]

    def of_messages(messages) -> list[str]:
        return [
            m["data"]["handover"]["note"]
            for m in messages
            if m["type"].startswith("approval.")
            and m["data"]["id"] == str(approval_id)
            and m["data"]["handover"]
        ]

    feeds = {
        "run": of_approvals(detail.json()["approvals"]),
        "runs": of_approvals(run_listed["approvals"]),
        "events": of_messages(events.json()["results"]),
        "run stream": of_messages(streamed(raw, f"/api/v1/runs/{run_id}/stream")),
        "stream": of_messages(streamed(raw, "/api/v1/stream")),
    }
    # Every feed told of the hand-over (once on the run, once per event on the event feeds).
    assert all(feeds.values()), feeds
    return feeds


FEEDS = ("run", "runs", "events", "run stream", "stream")


def everywhere(note: str) -> dict[str, set[str]]:
    """What `shown` gives when every feed tells the hand-over with this note."""
    return {feed: {note} for feed in FEEDS}


def shown(feeds: dict[str, list[str]]) -> dict[str, set[str]]:
    """The notes each feed told, by feed (a leak names its feed)."""
    return {feed: set(notes) for feed, notes in feeds.items()}


@pytest.fixture(autouse=True)
def fast_streams(settings):
    settings.DESK_SSE_POLL_SECONDS = 0.05


def test_on_a_run_open_to_every_reviewer_the_note_reaches_the_recipient_and_author_only(
    personas, interrupted_run
):
    """alice hands a call open to every reviewer to bob. bob (it is his now), alice (she wrote
    it) and an admin read the note on every feed; dave, a reviewer who may still read the run,
    and carol, who submitted it, read the hand-over with its note blank."""
    dave = make_user("dave", REVIEWERS)
    run, approval = interrupted_run()
    assert run.reviewers == [] and approval.assignees == []  # every reviewer may read the run
    approval_handover(approval_id=approval.id, by=personas.alice, to="bob", note=NOTE)

    for user in (personas.bob, personas.alice, personas.admin):
        assert shown(notes_on_every_feed(bearer(user), run.id, approval.id)) == everywhere(NOTE), user
    for user in (dave, personas.carol):
        assert shown(notes_on_every_feed(bearer(user), run.id, approval.id)) == everywhere(""), user


def test_a_note_handed_to_a_group_reaches_its_members_and_not_other_reviewers(personas, interrupted_run):
    """alice hands a call open to every reviewer to group finance: erin, in finance, reads the
    note; bob, a reviewer outside finance who may still read the run, does not."""
    erin = make_user("erin", REVIEWERS, "finance")
    run, approval = interrupted_run()
    approval_handover(approval_id=approval.id, by=personas.alice, to="group:finance", note=NOTE)

    assert shown(notes_on_every_feed(bearer(erin), run.id, approval.id)) == everywhere(NOTE)
    assert shown(notes_on_every_feed(bearer(personas.alice), run.id, approval.id)) == everywhere(NOTE)
    assert shown(notes_on_every_feed(bearer(personas.bob), run.id, approval.id)) == everywhere("")


def test_on_a_run_routed_to_a_group_the_note_stays_with_the_member_it_was_handed_to(
    personas, interrupted_run
):
    """Two refunds over 1,000, both routed to group finance. dave hands the first to erin with
    a note; frank, in finance too, still reads the run (the second refund is still his group's)
    but not the note; erin and dave do."""
    dave = make_user("dave", REVIEWERS, "finance")
    erin = make_user("erin", REVIEWERS, "finance")
    frank = make_user("frank", REVIEWERS, "finance")
    run, first = interrupted_run(script=two_refunds(1500))
    assert sorted(a.assignees for a in run.approvals.all()) == [["group:finance"], ["group:finance"]]
    approval_handover(approval_id=first.id, by=dave, to="erin", note=NOTE)

    assert shown(notes_on_every_feed(bearer(erin), run.id, first.id)) == everywhere(NOTE)
    assert shown(notes_on_every_feed(bearer(dave), run.id, first.id)) == everywhere(NOTE)
    assert shown(notes_on_every_feed(bearer(frank), run.id, first.id)) == everywhere("")


def test_cancelling_the_run_answers_with_the_note_blank_for_a_bystander(personas, interrupted_run):
    """A cancel answers with the run and its approvals: dave, a reviewer who may cancel a run
    open to every reviewer, is answered with the hand-over's note blank, as the feeds show it."""
    dave = make_user("dave", REVIEWERS)
    run, approval = interrupted_run()
    approval_handover(approval_id=approval.id, by=personas.alice, to="bob", note=NOTE)

    answer = client_with(bearer(dave)).post(f"/api/v1/runs/{run.id}/cancel")
    assert answer.status_code == 200, answer.json()
    [handed] = [a for a in answer.json()["approvals"] if a["id"] == str(approval.id)]
    assert handed["handover"]["by"] == "alice" and handed["handover"]["note"] == ""
