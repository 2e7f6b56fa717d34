"""The SSE streams' `Last-Event-ID` and `after`, in-process: `event_stream_app` driven with
ASGI messages directly (no server, no channel layer). Where to resume is read before who asks,
so a bad value is a 400 problem for anyone, and never an unhandled error in the ASGI app."""

from __future__ import annotations

import asyncio
import json

import pytest

from reviewdesk.api.streams import event_stream_app

# A refusal reads nothing, but the app's database_sync_to_async closes stale connections first.
pytestmark = pytest.mark.django_db


def refusal(headers: list[tuple[bytes, bytes]], query: bytes = b"") -> tuple[int, dict]:
    sent: list[dict] = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "method": "GET",
        "path": "/api/v1/stream",
        "headers": headers,
        "query_string": query,
    }
    asyncio.run(event_stream_app(scope, receive, send))
    start, body = sent[0], b"".join(m.get("body", b"") for m in sent[1:])
    return start["status"], json.loads(body)


@pytest.mark.parametrize(
    ("headers", "query"),
    [
        ([(b"last-event-id", "²".encode())], b""),  # isdigit() to Python, not a number to int()
        ([(b"last-event-id", b"1" * 5000)], b""),  # past what int() reads
        ([], "after=①".encode()),
        ([], b"after=-1"),
    ],
    ids=["superscript", "5000 digits", "circled digit", "negative"],
)
def test_a_resume_point_that_is_not_a_sequence_number_is_400_for_anyone(headers, query):
    status, problem = refusal(headers, query)
    assert status == 400 and problem["code"] == "bad_parameter", problem


def test_a_good_resume_point_reaches_the_check_of_who_asks():
    status, problem = refusal([(b"last-event-id", b"42")])
    assert status == 401 and problem["code"] == "not_authenticated", problem
