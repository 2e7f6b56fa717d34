"""An open SSE stream re-checks who holds it, in-process: the project's ASGI application
driven with ASGI messages (no server), on the test database, with rights re-checked at every
poll (DESK_SSE_HEARTBEAT_SECONDS=0). A stream opened with a browser session ends when that
session no longer logs its user in, as the desk socket does; a demoted admin's stream stops
carrying other users' runs at once."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.db import transaction
from django.test import Client

from reviewdesk.accounts.services import token_create
from reviewdesk.events.services import event_emit
from reviewdesk.runs.services import run_submit
from tests.conftest import SEND_EMAIL_SCRIPT

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def checked_at_every_poll(settings):
    settings.DESK_SSE_HEARTBEAT_SECONDS = 0
    settings.DESK_SSE_POLL_SECONDS = 0.05


def submitted(user, reviewers=None):
    return run_submit(
        submitter=user,
        agent="demo",
        input="x",
        reviewers=reviewers,
        model={"provider": "scripted", "script": SEND_EMAIL_SCRIPT},
    )


def emit(run, status: str) -> None:
    with transaction.atomic():
        event_emit(type="run.updated", data={"status": status}, run_id=run.id)


def streamed(headers: list[tuple[bytes, bytes]], meanwhile) -> bytes:
    """GET /api/v1/stream through reviewdesk.asgi.application while `meanwhile` (a sync
    callable) runs; the body sent until the stream ended or a second had passed."""
    from reviewdesk.asgi import application

    sent: list[dict] = []
    opened = [False]

    async def receive():
        if not opened[0]:
            opened[0] = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.Future()  # the client stays

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/api/v1/stream",
        "raw_path": b"/api/v1/stream",
        "root_path": "",
        "query_string": b"",
        "server": ("testserver", 80),
        "client": ("127.0.0.1", 1),
        "headers": [(b"host", b"testserver"), *headers],
    }

    async def main():
        task = asyncio.ensure_future(application(scope, receive, send))
        await asyncio.sleep(0.5)
        assert sent and sent[0]["status"] == 200, sent
        await sync_to_async(meanwhile)()
        await asyncio.wait({task}, timeout=1.0)
        task.cancel()

    asyncio.run(main())
    return b"".join(message.get("body", b"") for message in sent[1:])


def test_a_stream_opened_with_a_session_ends_when_the_user_logs_out(personas):
    browser = Client()
    browser.force_login(personas.carol)
    run = submitted(personas.carol)
    cookie = f"sessionid={browser.cookies['sessionid'].value}".encode()

    def log_out_then_emit():
        emit(run, "before-logout")
        browser.logout()
        emit(run, "after-logout")

    body = streamed([(b"cookie", cookie)], log_out_then_emit)
    assert b"event: end" in body
    assert b"after-logout" not in body


def test_a_session_stream_carries_on_while_the_session_holds(personas):
    browser = Client()
    browser.force_login(personas.carol)
    run = submitted(personas.carol)
    cookie = f"sessionid={browser.cookies['sessionid'].value}".encode()
    body = streamed([(b"cookie", cookie)], lambda: emit(run, "still-hers"))
    assert b"still-hers" in body and b"event: end" not in body


def test_a_demoted_admin_stops_hearing_of_other_users_runs(personas):
    eve = User.objects.create_user("eve", is_staff=True)  # an admin, no reviewer
    _, raw = token_create(user=eve, scopes=["audit"])
    run = submitted(personas.carol, reviewers=["alice"])

    def emit_demote_emit():
        emit(run, "while-admin")
        User.objects.filter(pk=eve.pk).update(is_staff=False)
        emit(run, "after-demotion")

    body = streamed([(b"authorization", f"Bearer {raw}".encode())], emit_demote_emit)
    assert b"after-demotion" not in body
