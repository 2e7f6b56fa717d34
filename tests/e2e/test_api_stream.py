"""Server-Sent Events against a real daphne: a client follows its run, drops, resumes with
Last-Event-ID, and ends up with every event of the run exactly once, in order."""

from __future__ import annotations

import http.client as httpclient
import json
import time
from urllib.parse import urlsplit

import pytest

from reviewdesk.accounts.services import token_create
from reviewdesk.events.models import DeskEvent
from tests.conftest import SEND_EMAIL_SCRIPT
from tests.e2e.conftest import http, wait_for_run

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


class SSE:
    """A raw SSE connection: http.client, so the test sees the bytes daphne sends."""

    def __init__(self, base: str, path: str, *, token: str | None, last_event_id: int | None = None):
        parts = urlsplit(base)
        self.conn = httpclient.HTTPConnection(parts.hostname, parts.port, timeout=20)
        headers = {"Accept": "text/event-stream"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if last_event_id is not None:
            headers["Last-Event-ID"] = str(last_event_id)
        self.conn.request("GET", path, headers=headers)
        self.response = self.conn.getresponse()

    def events(self):
        """Yield each event as {"id", "event", "data"}; comments and `retry:` are skipped."""
        fields: dict[str, str] = {}
        while True:
            line = self.response.readline()
            if not line:
                return
            line = line.decode().rstrip("\n")
            if not line:
                if "data" in fields:
                    yield {**fields, "data": json.loads(fields["data"])}
                fields = {}
            elif not line.startswith(":"):
                name, _, value = line.partition(": ")
                fields[name] = value

    def close(self) -> None:
        self.conn.close()


def read_until(stream: SSE, predicate, *, timeout: float = 30) -> list[dict]:
    seen, deadline = [], time.monotonic() + timeout
    for event in stream.events():
        seen.append(event)
        if predicate(event):
            return seen
        assert time.monotonic() < deadline, f"no matching event in {seen}"
    raise AssertionError(f"the stream ended after {seen}")


def submit(stack, token: str) -> dict:
    status, run = http(
        "POST",
        stack.url + "/api/v1/runs",
        token=token,
        body={
            "agent": "demo",
            "input": "Tell Ada her refund is on its way.",
            "model": {"provider": "scripted", "script": SEND_EMAIL_SCRIPT},
        },
    )
    assert status == 201, run
    return run


def is_status(status: str):
    return lambda e: e["event"] == "run.updated" and e["data"]["data"]["status"] == status


def test_a_client_resumes_its_run_stream_with_last_event_id_and_misses_nothing(live_stack, personas):
    _, carol = token_create(user=personas.carol, scopes=["submit"])
    _, alice = token_create(user=personas.alice, scopes=["review"])
    run = submit(live_stack, carol)

    first = SSE(live_stack.url, f"/api/v1/runs/{run['id']}/stream", token=carol)
    assert first.response.status == 200, live_stack.logs()
    assert first.response.getheader("Content-Type").startswith("text/event-stream")
    before = read_until(first, lambda e: e["event"] == "approval.created")
    first.close()  # the client drops here
    approval = before[-1]["data"]["data"]

    status, _ = http(
        "POST",
        f"{live_stack.url}/api/v1/approvals/{approval['id']}/decision",
        token=alice,
        body={"verdict": "approve", "checkpoint_id": approval["checkpoint_id"]},
    )
    assert status == 201
    wait_for_run(live_stack, carol, run["id"], "succeeded")  # its events were written meanwhile

    again = SSE(
        live_stack.url, f"/api/v1/runs/{run['id']}/stream", token=carol, last_event_id=int(before[-1]["id"])
    )
    after = read_until(again, is_status("succeeded"))
    again.close()

    seqs = [int(e["id"]) for e in before + after]
    assert seqs == sorted(set(seqs)), "an event was repeated or out of order"
    assert [e["data"]["seq"] for e in before + after] == seqs
    assert seqs == list(
        DeskEvent.objects.filter(run_id=run["id"]).order_by("id").values_list("id", flat=True)
    )


def test_the_all_runs_stream_carries_only_the_clients_runs_and_resumes(live_stack, personas):
    _, carol = token_create(user=personas.carol, scopes=["submit"])
    _, admin = token_create(user=personas.admin, scopes=["submit"])
    start = DeskEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0
    theirs = submit(live_stack, admin)
    mine = submit(live_stack, carol)
    stream = SSE(live_stack.url, f"/api/v1/stream?after={start}", token=carol)
    seen = read_until(stream, lambda e: e["event"] == "approval.created")
    stream.close()
    runs = {e["data"]["data"].get("run") or e["data"]["data"].get("id") for e in seen}
    assert runs == {mine["id"]}
    assert theirs["id"] not in runs


def test_a_stream_refuses_who_may_not_see_it_with_problem_json(live_stack, personas):
    _, carol = token_create(user=personas.carol, scopes=["submit"])
    _, olivia = token_create(user=personas.olivia, scopes=["submit"])
    run = submit(live_stack, carol)
    for token, status, code in (
        (None, 401, "not_authenticated"),
        ("rd_nope", 401, "authentication_failed"),
        (olivia, 404, "not_found"),
    ):
        stream = SSE(live_stack.url, f"/api/v1/runs/{run['id']}/stream", token=token)
        assert stream.response.status == status
        assert stream.response.getheader("Content-Type") == "application/problem+json"
        assert json.loads(stream.response.read())["code"] == code
        stream.close()
    bad = SSE(live_stack.url, "/api/v1/stream", token=carol, last_event_id=-1)
    assert bad.response.status == 400
    bad.close()


def test_daphne_sends_422_as_unprocessable_content(live_stack, personas):
    _, carol = token_create(user=personas.carol, scopes=["submit"])
    parts = urlsplit(live_stack.url)
    conn = httpclient.HTTPConnection(parts.hostname, parts.port, timeout=20)
    conn.request(
        "POST",
        "/api/v1/runs",
        body=json.dumps({"agent": "demo"}),
        headers={"Authorization": f"Bearer {carol}", "Content-Type": "application/json"},
    )
    response = conn.getresponse()
    assert (response.status, response.reason) == (422, "Unprocessable Content")
    conn.close()
