"""An open SSE stream re-checks who holds it, in-process: the project's ASGI application
driven with ASGI messages (no server), on the test database, with rights re-checked at every
poll (DESK_SSE_HEARTBEAT_SECONDS=0). A stream opened with a browser session ends when that
session no longer logs its user in, as the desk socket does; a demoted admin's stream stops
carrying other users' runs at once."""

from __future__ import annotations

import asyncio
import re

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.db import transaction
from django.test import Client

from reviewdesk.accounts.services import token_create
from reviewdesk.events.services import event_emit, latest_seq
from reviewdesk.runs.services import run_submit
from tests.conftest import SEND_EMAIL_SCRIPT
from tests.reviewdesk.api.sse import StreamCall

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


async def until(condition, timeout: float = 10) -> None:
    """Wait until `condition()` holds, failing after `timeout` seconds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "the condition never held"
        await asyncio.sleep(0.01)


KEEP_ALIVE = re.compile(rb": keep-alive seq=(\d+)\n")


def covered(body: bytes) -> int:
    """The furthest sequence a keep-alive says the stream's scans have covered (-1: none yet)."""
    return max((int(seq) for seq in KEEP_ALIVE.findall(body)), default=-1)


def streamed(headers: list[tuple[bytes, bytes]], meanwhile) -> bytes:
    """GET /api/v1/stream through reviewdesk.asgi.application while `meanwhile` (a sync
    callable) runs; the body sent until the stream ended, or until a keep-alive said its scans
    covered every event `meanwhile` wrote. Not "what came within a second": the keep-alive is
    sent by a poll that checked the stream's rights (at every poll here) and then scanned past
    those events, so an event missing from the body by then was withheld, not late."""
    call = StreamCall("/api/v1/stream", headers)

    async def main():
        task = call.start()
        await until(lambda: call.status is not None)
        assert call.status == 200, call.sent
        await sync_to_async(meanwhile)()
        written = await sync_to_async(latest_seq)()
        await until(lambda: task.done() or covered(call.body()) >= written)
        task.cancel()

    asyncio.run(main())
    return call.body()


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


def test_a_stream_opened_with_a_session_ends_when_the_users_password_changes(personas):
    """The session row survives a password change; the session's auth hash, checked at every
    poll here, no longer matches, and the stream ends (it is not cut off by the test)."""
    browser = Client()
    browser.force_login(personas.carol)
    cookie = f"sessionid={browser.cookies['sessionid'].value}".encode()
    call = StreamCall("/api/v1/stream", [(b"cookie", cookie)])

    def change_password():
        carol = User.objects.get(pk=personas.carol.pk)
        carol.set_password("an entirely new passphrase")
        carol.save()

    async def main():
        task = call.start()
        await until(lambda: b"keep-alive" in call.body())  # a poll has checked the session
        await sync_to_async(change_password)()
        await asyncio.wait_for(task, timeout=10)

    asyncio.run(main())
    assert call.status == 200
    assert call.body().endswith(b"event: end\ndata: {}\n\n")


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


def ended_after(headers: list[tuple[bytes, bytes]], meanwhile) -> tuple[bytes, float | None]:
    """GET /api/v1/stream through reviewdesk.asgi.application; `meanwhile` (a sync callable)
    runs once the stream is open. The body sent, and how many seconds after `meanwhile`
    returned the stream ended (None: still open 2 s later)."""
    call = StreamCall("/api/v1/stream", headers)

    async def main() -> float | None:
        loop = asyncio.get_running_loop()
        task = call.start()
        await until(lambda: call.status is not None)
        assert call.status == 200, call.sent
        await sync_to_async(meanwhile)()
        done_at = loop.time()
        finished, _ = await asyncio.wait({task}, timeout=2.0)
        took = loop.time() - done_at if finished else None
        task.cancel()
        return took

    took = asyncio.run(main())
    return call.body(), took


def _revoke(token, user) -> None:
    from reviewdesk.accounts.services import token_revoke

    token_revoke(token=token, by=None)


def _deactivate(token, user) -> None:
    User.objects.filter(pk=user.pk).update(is_active=False)


def _expire(token, user) -> None:
    from django.utils import timezone

    from reviewdesk.accounts.models import ApiToken

    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now())


@pytest.mark.parametrize("end_it", [_revoke, _deactivate, _expire], ids=["revoked", "deactivated", "expired"])
def test_a_token_stream_ends_within_a_poll_of_its_token_going_not_a_keep_alive(personas, settings, end_it):
    """A keep-alive a minute away (DESK_SSE_HEARTBEAT_SECONDS=60) and a poll every 0.05 s: the
    token revoked, its user deactivated or the token expired, the stream sends `event: end`
    within a second, and not the event committed after it."""
    settings.DESK_SSE_HEARTBEAT_SECONDS = 60
    token, raw = token_create(user=personas.carol, scopes=["submit"])
    run = submitted(personas.carol)

    def end_then_emit():
        emit(run, "before-the-end")
        end_it(token, personas.carol)
        emit(run, "after-the-end")

    body, took = ended_after([(b"authorization", f"Bearer {raw}".encode())], end_then_emit)
    assert took is not None and took < 1.0, (took, body)
    assert body.endswith(b"event: end\ndata: {}\n\n"), body
    assert b"after-the-end" not in body


def test_a_token_stream_between_keep_alives_reads_its_token_once_a_poll(personas):
    """Between keep-alives a poll of a token's stream makes one statement more than a poll
    without a token: a read of the token by its primary key (its user's `is_active` joined in)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from reviewdesk.api.views.streams import _poll

    token, _ = token_create(user=personas.carol, scopes=["submit"])
    with CaptureQueriesContext(connection) as without_token:
        _poll(personas.carol, None, None, 0, None, False)
    with CaptureQueriesContext(connection) as with_token:
        user, _events, _covered = _poll(personas.carol, token, None, 0, None, False)
    assert user == personas.carol
    assert len(with_token) == len(without_token) + 1
    [read] = [q["sql"] for q in with_token if "accounts_apitoken" in q["sql"]]
    assert '"accounts_apitoken"."id" = ' in read and '"auth_user"."is_active"' in read, read
