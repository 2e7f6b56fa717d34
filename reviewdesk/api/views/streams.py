"""Server-Sent Events for API clients: `GET /api/v1/runs/{id}/stream` and `GET /api/v1/stream`.

Each desk event goes out as `id: SEQ` / `event: TYPE` / `data: {"seq", "type", "data"}`. A
client that reconnects with `Last-Event-ID: SEQ` (EventSource does so by itself), or with
`?after=SEQ`, gets every event after SEQ exactly once. Any other query parameter is 400
`bad_parameter`, as on every list.

Why the stream reads the DeskEvent table instead of the Channels groups: the channel layer
is at-most-once and drops silently, and its groups address reviewers and admins, not the
submitter who follows their own run. The table is the source of truth, and its ids are
commit order (writers serialise, see `events.services`), so a scan that stops at the
`latest_seq()` read before it never skips an event that commits later: that event has a
higher id and the next scan finds it. A poll every DESK_SSE_POLL_SECONDS is the price.

Who is asking is checked like the REST API: a bearer token (`BearerTokenAuthentication`,
so revoked tokens and inactive users are refused) or a session; any scope may read; the
run must be one the user may see (404 otherwise, like a missing run). The rights are
checked again at each keep-alive: a revoked token or a run no longer visible ends the stream.
A token's stream also re-reads its token at every poll (one statement by primary key), so a
revoked or expired token, or a deactivated user, ends it within DESK_SSE_POLL_SECONDS.

An approval event is sent as the desk socket sends it (`approvals.reads.representation.message_for`): a
hand-over's note only to whom the call now reaches, admins and the reviewer who wrote it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qsl

from channels.db import database_sync_to_async
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Q
from django.utils import timezone
from rest_framework.exceptions import AuthenticationFailed

from reviewdesk.accounts.authentication import BearerTokenAuthentication, session_user_now
from reviewdesk.accounts.models import ApiToken
from reviewdesk.accounts.roles import forget_group_names, is_admin
from reviewdesk.approvals.reads.representation import message_for
from reviewdesk.events.models import DeskEvent
from reviewdesk.events.services import latest_seq
from reviewdesk.lib.errors import ERROR_CODES, DeskError, NotFound
from reviewdesk.lib.numbers import whole_number
from reviewdesk.runs.access import run_get_visible, runs_visible_to

SCAN_LIMIT = 500
# The query parameters a stream takes (Last-Event-ID is a header).
STREAM_PARAMETERS = ("after",)


class StreamRefused(Exception):
    def __init__(self, status: int, code: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.code, self.detail = status, code, detail


def sse_message(event: DeskEvent, user) -> bytes:
    """The event as `user` may read it (`message_for`: a hand-over's note, as on the desk socket)."""
    message = message_for(event.as_message(), username=user.get_username(), admin=is_admin(user))
    data = json.dumps(message, separators=(",", ":"))
    return f"id: {event.id}\nevent: {event.type}\ndata: {data}\n\n".encode()


def _authenticate(headers: dict[bytes, bytes], session_user: Any):
    """(user, token or None), like the REST API: bearer first, then the session."""
    authorization = headers.get(b"authorization", b"")
    if authorization:
        # What BearerTokenAuthentication reads of a request, so the stream authenticates as the API does.
        text = authorization.decode("latin-1")
        request = SimpleNamespace(
            META={"HTTP_AUTHORIZATION": text}, headers={"authorization": text, "Authorization": text}
        )
        try:
            result = BearerTokenAuthentication().authenticate(request)
        except AuthenticationFailed:
            raise StreamRefused(401, "authentication_failed", "invalid or revoked token") from None
        if result is not None:
            # The stream outlives this lookup: its scans read the user's groups as they are then.
            forget_group_names(result[0])
            return result
    if session_user is not None and session_user.is_authenticated and session_user.is_active:
        return session_user, None
    raise StreamRefused(401, "not_authenticated", "send Authorization: Bearer <token>")


def _still_allowed(user, token, run_id, session_key: str | None):
    """The stream's user as they are now, or None once it must end: the token revoked or
    expired; the session logged out or its password changed (a stream opened with a browser
    session: the desk socket's own check); the user deactivated; the run no longer theirs.
    Fresh from the database, so a role taken away (an admin demoted) narrows the next scan."""
    if token is not None:
        token.refresh_from_db(fields=["revoked_at", "expires_at"])
        if not token.is_usable():  # revoked, or expired since the stream opened
            return None
        now = get_user_model().objects.filter(pk=user.pk, is_active=True).first()
    else:
        now = session_user_now(user.pk, session_key)
    if now is None:
        return None
    if run_id is not None:
        try:
            run_get_visible(run_id=run_id, user=now)
        except NotFound:
            return None
    return now


def _events_after(user, run_id, after: int) -> tuple[list[DeskEvent], int]:
    """The events after `after` this stream may send, and the sequence the scan covered."""
    end = latest_seq()
    rows = DeskEvent.objects.filter(id__gt=after, id__lte=end)
    if run_id is not None:
        rows = rows.filter(run_id=run_id)
    else:
        rows = rows.filter(run__in=runs_visible_to(user).values("id"))
    events = list(rows.order_by("id")[:SCAN_LIMIT])
    covered = events[-1].id if len(events) == SCAN_LIMIT else end
    return events, covered


def _query(scope) -> dict[str, str]:
    """The query, read as the REST lists read theirs (percent-decoded; the last of a repeated
    name wins); a name the streams do not take is 400 `bad_parameter` naming it, as there
    (`filters.read_filters`), so `?since=5` is not a stream from the start."""
    pairs = parse_qsl(scope.get("query_string", b"").decode(errors="replace"), keep_blank_values=True)
    unknown = sorted({name for name, _ in pairs} - set(STREAM_PARAMETERS))
    if unknown:
        raise StreamRefused(
            400,
            "bad_parameter",
            f"unknown query parameter {', '.join(unknown)}; this endpoint takes {', '.join(STREAM_PARAMETERS)}",
        )
    return dict(pairs)


def _parse_after(scope, headers) -> int:
    query = _query(scope)
    raw = headers.get(b"last-event-id", b"").decode(errors="replace").strip()
    if not raw:
        raw = query.get("after", "0")
    after = whole_number(raw)
    if after is None:
        raise StreamRefused(400, "bad_parameter", "Last-Event-ID and after must be a non-negative integer")
    return after


async def event_stream_app(scope, receive, send) -> None:
    """One SSE stream, as a plain ASGI app: it must hear the client leave while it streams
    (an AsyncHttpConsumer cannot: its `handle` holds the only reader of `receive`)."""
    while True:  # the request body: a GET has none, but the messages must be read
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        if not message.get("more_body"):
            break
    headers = {name.lower(): value for name, value in scope.get("headers", [])}
    run_id = scope.get("url_route", {}).get("kwargs", {}).get("run_id")
    try:
        if scope.get("method") != "GET":
            raise StreamRefused(405, "method_not_allowed", "streams take GET only")
        after = _parse_after(scope, headers)
        user, token = await database_sync_to_async(_authenticate)(headers, scope.get("user"))
        if run_id is not None:
            try:
                await database_sync_to_async(run_get_visible)(run_id=run_id, user=user)
            except DeskError as exc:
                raise StreamRefused(exc.status, exc.code, exc.detail) from None
    except StreamRefused as refused:
        await _refuse(send, refused)
        return
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", b"text/event-stream; charset=utf-8"),
                (b"cache-control", b"no-cache"),
                (b"x-accel-buffering", b"no"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": b"retry: 2000\n\n", "more_body": True})
    session = scope.get("session")
    session_key = getattr(session, "session_key", None) if token is None else None
    streaming = asyncio.ensure_future(_stream(send, user, token, run_id, after, session_key))
    leaving = asyncio.ensure_future(_until_disconnect(receive))
    await asyncio.wait({streaming, leaving}, return_when=asyncio.FIRST_COMPLETED)
    for task in (streaming, leaving):
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _until_disconnect(receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _refuse(send, refused: StreamRefused) -> None:
    assert refused.code in ERROR_CODES
    problem = {
        "type": "about:blank",
        "title": refused.detail,
        "status": refused.status,
        "detail": refused.detail,
        "code": refused.code,
    }
    headers = [(b"content-type", b"application/problem+json")]
    if refused.status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="api"'))
    if refused.status == 405:
        headers.append((b"allow", b"GET"))
    await send({"type": "http.response.start", "status": refused.status, "headers": headers})
    await send({"type": "http.response.body", "body": json.dumps(problem).encode()})


def _token_usable(token) -> bool:
    """Whether the stream's token is still neither revoked nor expired, and its user active:
    one statement, the token read by its primary key with its user joined."""
    return (
        ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True, user__is_active=True)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now()))
        .exists()
    )


def _poll(user, token, run_id, after: int, session_key: str | None, check: bool):
    """(the user now, or None: the stream ends; the events to send; the sequence covered).
    When `check`, rights are checked first, in the same call as the scan: no event committed
    after a logout or a demotion is sent on the strength of rights checked before it. Between
    keep-alives a token's stream re-reads its token at each poll, before the scan, the same
    way: a revoked or expired token, or a deactivated user, ends it within one poll."""
    if check:
        user = _still_allowed(user, token, run_id, session_key)
        if user is None:
            return None, [], after
    elif token is not None and not _token_usable(token):
        return None, [], after
    events, covered = _events_after(user, run_id, after)
    return user, events, covered


async def _stream(send, user, token, run_id, after: int, session_key: str | None) -> None:
    loop = asyncio.get_running_loop()
    last_beat = loop.time()
    while True:
        due = loop.time() - last_beat >= settings.DESK_SSE_HEARTBEAT_SECONDS
        user, events, covered = await database_sync_to_async(_poll)(
            user, token, run_id, after, session_key, due
        )
        if user is None:
            await send({"type": "http.response.body", "body": b"event: end\ndata: {}\n\n"})
            return
        for event in events:
            await send({"type": "http.response.body", "body": sse_message(event, user), "more_body": True})
        after = max(after, covered)
        if due:
            beat = f": keep-alive seq={after}\n\n".encode()
            await send({"type": "http.response.body", "body": beat, "more_body": True})
            last_beat = loop.time()
        if len(events) < SCAN_LIMIT:
            await asyncio.sleep(settings.DESK_SSE_POLL_SECONDS)
