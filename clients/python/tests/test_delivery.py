"""How a decision comes back: polling, the desk's SSE stream (Last-Event-ID), a webhook whose
HMAC is checked before anything else (C4), and the list of decided, unconsumed approvals."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time

import pytest
from support import ARGUMENTS, submit_one

from reviewdesk_client import WebhookError
from reviewdesk_client.delivery import EventStream, decided_unconsumed, parse_webhook


def decide_later(desk, approval_id, verdict="approve", delay=0.5, **fields):
    timer = threading.Timer(delay, desk.decide, args=(approval_id, verdict), kwargs=fields)
    timer.start()
    return timer


def test_poll_wait_times_out_while_pending_then_returns_the_decision(desk, client):
    ticket = submit_one(client)
    started = time.monotonic()
    assert client.wait(ticket, 0.6, via="poll", interval=0.2) is None
    assert time.monotonic() - started >= 0.6
    decide_later(desk, ticket.approval_id, "reject", reason="no").join()
    outcome = client.wait(ticket, 10, via="poll", interval=0.2)
    assert outcome.status == "rejected" and outcome.decision["reason"] == "no"


def test_sse_wait_returns_the_decision_as_it_is_made(desk, client):
    ticket = submit_one(client)
    timer = decide_later(desk, ticket.approval_id, "approve", delay=1.0)
    outcome = client.wait(ticket, 20, via="sse")
    timer.join()
    assert outcome is not None and outcome.status == "approved"
    assert client.verify(outcome.decision, ticket, current_arguments=ARGUMENTS).verdict == "approve"


def test_sse_wait_finds_a_decision_made_before_it_started(desk, client):
    ticket = submit_one(client)
    desk.decide(ticket.approval_id, "approve")
    outcome = client.wait(ticket, 10, via="sse")
    assert outcome is not None and outcome.status == "approved"


def test_sse_wait_times_out_while_pending(desk, client):
    ticket = submit_one(client)
    started = time.monotonic()
    assert client.wait(ticket, 1.5, via="sse") is None
    assert 1.5 <= time.monotonic() - started < 10


def test_the_stream_resumes_after_last_event_id_without_repeats(desk, client):
    """Read a run's events, note the last sequence; a new stream opened with Last-Event-ID gets
    exactly the events after it (each once), as a reconnect does."""
    ticket = submit_one(client)
    stop = threading.Event()
    first = EventStream(client, run_id=ticket.run_id, stop=stop)
    seen = []
    for event in first:
        if event["type"] == "keep-alive":
            break  # everything so far has been sent
        seen.append(event["seq"])
    stop.set()
    assert seen, "the run's submit made no event"
    resume_at = first.last_seq
    desk.decide(ticket.approval_id, "approve")
    stop2 = threading.Event()
    second = EventStream(client, after=resume_at, run_id=ticket.run_id, stop=stop2)
    after = []
    deadline = time.monotonic() + 15
    for event in second:
        if event["type"] != "keep-alive":
            after.append(event)
            if event["type"] == "approval.updated" and event["data"]["status"] == "approved":
                break
        if time.monotonic() > deadline:
            break
    stop2.set()
    assert after and all(e["seq"] > resume_at for e in after)
    assert len({e["seq"] for e in after}) == len(after)
    assert after[-1]["data"]["id"] == ticket.approval_id


def test_decided_unconsumed_lists_a_decision_until_it_is_consumed(desk, client):
    ticket = submit_one(client)
    pending_run = ticket.run_id
    assert decided_unconsumed(client, run=pending_run) == []
    desk.decide(ticket.approval_id, "approve")
    listed = decided_unconsumed(client, run=pending_run)
    assert [a["id"] for a in listed] == [ticket.approval_id]
    verified = client.verify(listed[0]["decision"], ticket, current_arguments=ARGUMENTS)
    client.consume(verified)
    assert decided_unconsumed(client, run=pending_run) == []


# --- C4: webhooks -------------------------------------------------------------------------------
@pytest.fixture
def webhook(desk, webhook_receiver):
    status, body = desk.api(
        "POST", "/api/v1/webhooks", body={"url": webhook_receiver.url, "events": ["approval.decided"]}
    )
    assert status == 201, body
    return webhook_receiver, body["secret"]


def delivery_for(receiver, approval_id, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        headers, body = receiver.next(timeout=max(0.1, deadline - time.monotonic()))
        if json.loads(body).get("data", {}).get("id") == approval_id:
            return headers, body
    raise AssertionError("no delivery for the approval")


def signed(secret: str, body: bytes, t: int) -> dict[str, str]:
    digest = hmac.new(secret.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return {"Desk-Signature": f"t={t},v1={digest}"}


def test_a_webhook_delivery_verifies_and_carries_the_signed_decision(desk, client, webhook):
    receiver, secret = webhook
    ticket = submit_one(client)
    desk.decide(ticket.approval_id, "approve")
    headers, body = delivery_for(receiver, ticket.approval_id)
    [event] = parse_webhook(headers, body, secret)
    assert event["type"] == "approval.decided" and event["data"]["status"] == "approved"
    verified = client.verify(event["data"]["decision"], ticket, current_arguments=ARGUMENTS)
    client.consume(verified)


def test_a_webhook_with_a_bad_hmac_or_an_old_timestamp_is_refused(desk, client, webhook):
    receiver, secret = webhook
    ticket = submit_one(client)
    desk.decide(ticket.approval_id, "approve")
    headers, body = delivery_for(receiver, ticket.approval_id)
    parse_webhook(headers, body, secret)  # the genuine delivery passes
    header = next(v for k, v in headers.items() if k.lower() == "desk-signature")
    t = int(header.split(",")[0].split("=")[1])
    with pytest.raises(WebhookError, match="HMAC"):
        parse_webhook({"Desk-Signature": f"t={t},v1={'0' * 64}"}, body, secret)
    with pytest.raises(WebhookError, match="HMAC"):
        parse_webhook(headers, body.replace(b"approved", b"rejected"), secret)
    with pytest.raises(WebhookError, match="HMAC"):
        parse_webhook(headers, body, "another-secret")
    old = int(time.time()) - 301
    with pytest.raises(WebhookError, match="tolerance"):
        parse_webhook(signed(secret, body, old), body, secret)  # a correct HMAC, too old
    with pytest.raises(WebhookError, match="no Desk-Signature"):
        parse_webhook({}, body, secret)
    with pytest.raises(WebhookError, match="malformed"):
        parse_webhook({"Desk-Signature": "v1=abc"}, body, secret)


def test_an_expired_approval_settles_without_a_decision(desk, client):
    """The desk's sweep (beat) expires the call after its TTL; the client learns it as an outcome
    with no decision to verify, by the stream as by polling."""
    ticket = submit_one(client, approval_ttl_seconds=10)
    outcome = client.wait(ticket, 40, via="sse")
    assert outcome is not None and (outcome.status, outcome.decision) == ("expired", None)
    assert client.outcome(ticket).status == "expired"
