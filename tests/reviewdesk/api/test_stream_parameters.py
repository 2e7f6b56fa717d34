"""The SSE streams' `Last-Event-ID` and `after`, in-process: `event_stream_app` driven with
ASGI messages directly (no server, no channel layer). Where to resume is read before who asks,
so a bad value is a 400 problem for anyone, and never an unhandled error in the ASGI app."""

from __future__ import annotations

import asyncio
import json

import pytest

from reviewdesk.api.views.streams import event_stream_app

# A refusal reads nothing, but the app's database_sync_to_async closes stale connections first.
pytestmark = pytest.mark.django_db


def refusal(
    headers: list[tuple[bytes, bytes]], query: bytes = b"", run_id: str | None = None
) -> tuple[int, dict]:
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
    if run_id is not None:
        scope["path"] = f"/api/v1/runs/{run_id}/stream"
        scope["url_route"] = {"kwargs": {"run_id": run_id}}
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


@pytest.mark.parametrize(
    ("query", "named"),
    [
        (b"since=5", "since"),
        (b"after=3&since=1", "since"),
        (b"limit=10&cursor=x", "cursor, limit"),
        (b"since", "since"),
        (b"%73ince=5", "since"),  # a name is read percent-decoded, as the REST lists read it
    ],
    ids=["since", "after and since", "two unknown", "a bare name", "percent-encoded"],
)
@pytest.mark.parametrize(
    "run_id", [None, "5b0c6f1e-0000-4000-8000-000000000000"], ids=["all runs", "one run"]
)
def test_an_unknown_query_parameter_is_400_naming_it_not_a_stream_from_the_start(query, named, run_id):
    """Like every list (`filters.read_filters`): a typo such as `?since=` must not stream
    every event from the start as if nothing were asked."""
    status, problem = refusal([(b"last-event-id", b"42")], query, run_id=run_id)
    assert status == 400 and problem["code"] == "bad_parameter", problem
    assert f"unknown query parameter {named};" in problem["detail"] and "after" in problem["detail"]


def test_after_alone_is_still_a_known_parameter():
    status, problem = refusal([], b"after=7")
    assert status == 401 and problem["code"] == "not_authenticated", problem
