"""/ws/desk/ under attack: bad frames, foreign origins, rights lost while the socket is open.

Through the real ASGI stack and the Redis channel layer; heartbeats every 2 s in tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import Group, User
from django.contrib.sessions.models import Session
from django.utils import timezone

from reviewdesk.accounts.roles import REVIEWERS
from tests.reviewdesk.desk.test_desk_socket import (
    MARKER,
    ORIGIN,
    communicator,
    in_thread,
    push_marker,
    receive_until,
    session_headers,
)

pytestmark = pytest.mark.django_db(transaction=True)

REPO = Path(__file__).resolve().parents[3]


def with_origin(headers, origin: bytes):
    return [h for h in headers if h[0] != b"origin"] + [(b"origin", origin)]


async def connected_with_snapshot(headers):
    comm = communicator(headers)
    connected, code = await comm.connect(timeout=10)  # the default second ran out on a loaded machine
    assert connected, code
    assert (await comm.receive_json_from(timeout=5))["type"] == "snapshot"
    return comm


async def next_non_heartbeat(comm) -> dict:
    while True:
        message = await comm.receive_json_from(timeout=10)
        if message["type"] != "heartbeat":
            return message


@pytest.mark.parametrize(
    "frame",
    [
        "not json",
        "{",
        '{"type": "replay", "after": 1e400}',
        '{"type": "replay", "after": "7"}',
        '{"type": "replay", "after": -1}',
        '{"type": "replay", "after": 1180591620717411303424}',
        '{"type": "replay", "after": true}',
        "[" * 100_000,
        b"\x00binary",
    ],
    ids=["text", "truncated", "1e400", "a string", "negative", "2**70", "true", "deeply nested", "binary"],
)
def test_a_bad_frame_gets_an_error_message_and_the_socket_stays_open(personas, frame):
    headers = session_headers(personas.alice)

    async def scenario():
        comm = await connected_with_snapshot(headers)
        if isinstance(frame, bytes):
            await comm.send_to(bytes_data=frame)
        else:
            await comm.send_to(text_data=frame)
        error = await next_non_heartbeat(comm)
        assert error["type"] == "error", error

        await comm.send_json_to({"type": "replay", "after": 0})  # still open, still serving
        assert (await next_non_heartbeat(comm))["type"] == "replay.done"
        await comm.disconnect()

    async_to_sync(scenario)()


@pytest.mark.parametrize(
    ("origin", "accepted"),
    [
        (b"http://127.0.0.1:8000", True),
        (b"http://localhost:8000", True),
        (b"https://127.0.0.1:8000", False),  # the embedded default is served over http only
        (b"https://localhost:8000", False),
        (b"http://127.0.0.1", False),  # port 80, not the served port
        (b"http://127.0.0.1:9000", False),
        (b"ftp://127.0.0.1:8000", False),
        (b"http://127.0.0.1.evil.example:8000", False),
        (b"http://user@127.0.0.1:8000", False),
        (b"null", False),
    ],
)
def test_the_origin_must_match_the_allow_list_exactly_scheme_host_and_port(
    personas, settings, origin, accepted
):
    assert [
        f"http://{host}:8000" for host in ("127.0.0.1", "localhost", "testserver")
    ] == settings.DESK_WS_ALLOWED_ORIGINS
    headers = with_origin(session_headers(personas.alice), origin)

    async def scenario():
        comm = communicator(headers)
        connected, _ = await comm.connect()
        assert connected is accepted
        if connected:
            await comm.disconnect()

    async_to_sync(scenario)()


def default_origins_of_a_desk_started_with(**env: str) -> list[str]:
    """DESK_WS_ALLOWED_ORIGINS as a desk process started with `env` computes it from settings."""
    environ = {k: v for k, v in os.environ.items() if k not in {"DESK_WS_ALLOWED_ORIGINS", "PORT"}}
    code = (
        "from django.conf import settings; import json; print(json.dumps(settings.DESK_WS_ALLOWED_ORIGINS))"
    )
    out = subprocess.run(
        [sys.executable, "-c", f"import django; django.setup(); {code}"],
        env={**environ, "DJANGO_SETTINGS_MODULE": "reviewdesk.settings", **env},
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    ("origin", "accepted"),
    [
        (b"https://localhost", True),
        (b"https://localhost:443", True),
        (b"http://localhost", False),  # same host, the scheme the desk is not served on
        (b"http://localhost:8000", False),
        (b"https://localhost:8000", True),  # ALLOWED_HOSTS on PORT, in the served scheme
    ],
)
def test_a_desk_served_over_https_accepts_sockets_from_https_origins_only(
    personas, settings, origin, accepted
):
    """The default list as a desk started with an https DESK_PUBLIC_URL computes it (a real
    settings import in a child process), then sockets through the real ASGI stack. The host is
    localhost: Channels' host check reads ALLOWED_HOSTS once, when the application is built."""
    origins = default_origins_of_a_desk_started_with(
        DESK_PUBLIC_URL="https://localhost", DJANGO_ALLOWED_HOSTS="localhost"
    )
    assert origins == ["https://localhost", "https://localhost:8000"]
    settings.DESK_WS_ALLOWED_ORIGINS = origins
    headers = with_origin(session_headers(personas.alice), origin)

    async def scenario():
        comm = communicator(headers)
        connected, _ = await comm.connect()
        assert connected is accepted
        if connected:
            await comm.disconnect()

    async_to_sync(scenario)()


def test_a_socket_is_closed_at_once_when_its_user_logs_out(personas, settings):
    """With the heartbeat an hour away, only the re-check pushed when the session row goes can
    close it within the 5 s waited here."""
    settings.DESK_WS_HEARTBEAT_SECONDS = 3600
    headers = session_headers(personas.alice)

    async def scenario():
        comm = await connected_with_snapshot(headers)
        await in_thread(lambda: Session.objects.all().delete())()  # what logout does to the session

        closed = await comm.receive_output(timeout=5)
        assert closed["type"] == "websocket.close" and closed["code"] == 4403

    async_to_sync(scenario)()


def change_password(user) -> None:
    """What a password change does to the user row (Django's views keep the changing session
    alive with update_session_auth_hash; every other session's hash no longer matches)."""
    user = User.objects.get(pk=user.pk)
    user.set_password("an entirely new passphrase")
    user.save()


def test_a_socket_is_closed_at_once_when_its_users_password_changes(personas, settings):
    """The session row is untouched by a password change: only the session's auth hash, compared
    at the re-check pushed when the user row is saved, can close the socket within the 5 s
    waited here (the heartbeat is an hour away)."""
    settings.DESK_WS_HEARTBEAT_SECONDS = 3600
    headers = session_headers(personas.alice)

    async def scenario():
        comm = await connected_with_snapshot(headers)
        await in_thread(lambda: change_password(personas.alice))()

        closed = await comm.receive_output(timeout=5)
        assert closed["type"] == "websocket.close" and closed["code"] == 4403

    async_to_sync(scenario)()


def test_a_socket_is_closed_at_the_next_heartbeat_once_its_session_expires(personas, settings):
    """An expiring session changes no row a signal sees: the heartbeat's own check closes it."""
    settings.DESK_WS_HEARTBEAT_SECONDS = 1
    headers = session_headers(personas.alice)

    async def scenario():
        comm = await connected_with_snapshot(headers)
        past = timezone.now() - timedelta(minutes=1)
        await in_thread(lambda: Session.objects.all().update(expire_date=past))()

        closed = await comm.receive_output(timeout=5)
        while closed["type"] != "websocket.close":  # a heartbeat may have been on its way
            closed = await comm.receive_output(timeout=5)
        assert closed["code"] == 4403

    async_to_sync(scenario)()


@pytest.mark.parametrize(
    "remove",
    [
        lambda alice: alice.groups.remove(Group.objects.get(name=REVIEWERS)),
        lambda alice: Group.objects.get(name=REVIEWERS).user_set.remove(alice),
    ],
    ids=["from the user's side", "from the group's side"],
)
def test_a_socket_is_closed_at_once_when_its_user_loses_the_reviewer_role(personas, settings, remove):
    settings.DESK_WS_HEARTBEAT_SECONDS = 3600  # only the recheck push can close it in time
    headers = session_headers(personas.alice)

    async def scenario():
        comm = await connected_with_snapshot(headers)
        await in_thread(lambda: remove(personas.alice))()

        closed = await comm.receive_output(timeout=5)
        while closed["type"] != "websocket.close":
            closed = await comm.receive_output(timeout=5)
        assert closed["code"] == 4403

    async_to_sync(scenario)()


def test_another_sessions_socket_of_the_same_user_stays_open_after_one_logs_out(personas, settings):
    settings.DESK_WS_HEARTBEAT_SECONDS = 3600
    staying, leaving = session_headers(personas.alice), session_headers(personas.alice)

    async def scenario():
        kept = await connected_with_snapshot(staying)
        gone = await connected_with_snapshot(leaving)
        key = dict(leaving)[b"cookie"].decode().split("sessionid=")[1].split(";")[0]
        await in_thread(lambda: Session.objects.filter(session_key=key).delete())()

        closed = await gone.receive_output(timeout=5)
        assert closed["type"] == "websocket.close" and closed["code"] == 4403
        # The re-check reached both sockets over alice's group; a marker sent after it on the
        # same group reaches `kept` only once it has handled the re-check, and open.
        await in_thread(push_marker)(personas.alice.pk)
        await receive_until(kept, MARKER)
        await kept.disconnect()

    async_to_sync(scenario)()


def test_a_replay_after_the_reviewer_role_is_gone_closes_the_socket_instead_of_answering(personas, settings):
    settings.DESK_WS_HEARTBEAT_SECONDS = 3600  # only the replay can notice
    headers = session_headers(personas.alice)

    async def scenario():
        comm = await connected_with_snapshot(headers)
        await in_thread(lambda: personas.alice.groups.remove(Group.objects.get(name=REVIEWERS)))()

        await comm.send_json_to({"type": "replay", "after": 0})

        closed = await comm.receive_output(timeout=10)
        assert closed == {"type": "websocket.close", "code": 4403}

    async_to_sync(scenario)()


def test_the_origin_of_the_existing_tests_is_the_embedded_defaults():
    assert ORIGIN == (b"origin", b"http://127.0.0.1:8000")


def test_a_database_error_during_a_heartbeat_skips_that_beat_and_keeps_the_socket(personas, monkeypatch):
    """Fault injection: the rights check raises DatabaseError once (as SQLite's "database is
    locked" would); the socket stays open and the next heartbeat arrives. The channel layer
    and the database are the real ones; only that one call is made to fail."""
    from django.db import OperationalError

    from reviewdesk.desk import consumers

    real = consumers._rights_now
    failures = iter([OperationalError("database is locked")])

    async def flaky(user_pk, session_key):
        failure = next(failures, None)
        if failure is not None:
            raise failure
        return await real(user_pk, session_key)

    monkeypatch.setattr(consumers, "_rights_now", flaky)
    headers = session_headers(personas.alice)

    async def scenario():
        comm = await connected_with_snapshot(headers)
        message = await comm.receive_json_from(timeout=10)
        assert message["type"] == "heartbeat"  # the failed beat was skipped, not fatal
        await comm.disconnect()

    async_to_sync(scenario)()
