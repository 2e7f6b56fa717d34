"""Idempotency-Key for POSTs (IETF draft): replay, 422 on a different body, 409 in flight.

Only a success (2xx) is kept and replayed; a refusal (4xx) or a failure (5xx) leaves the key free.

The handler's writes and the stored response commit in one transaction that
first locks the key's record and checks it still belongs to this request. So a
request that died left nothing but an in-flight record, which a repeat may take
over once it is older than DESK_IDEMPOTENCY_INFLIGHT_SECONDS; and a takeover of a
request that is merely slow waits for it on that lock, then replays its answer.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from rest_framework.exceptions import APIException
from rest_framework.response import Response

from reviewdesk.api.errors import problem, problem_exception_handler
from reviewdesk.api.models import IdempotencyRecord
from reviewdesk.lib.db import atomic_appends_last
from reviewdesk.lib.errors import DeskError

HEADER = "Idempotency-Key"
KEY_MAX = 200
IN_FLIGHT = IdempotencyRecord.State.IN_FLIGHT
# Part of the first response a replay repeats besides status and body: where the created thing is.
REPLAYED_HEADERS = ("Location",)


def idempotent(request, handler: Callable[[], Response]) -> Response:
    key = request.headers.get(HEADER)
    if key is None:
        return handler()
    # A field's surrounding spaces and tabs are not part of its value (RFC 9110, 5.5): "k " is
    # "k", and a key of blanks names nothing, so it is refused like an empty one.
    key = key.strip(" \t")
    if not key or len(key) > KEY_MAX:
        return problem(
            400,
            "Malformed request",
            f"{HEADER} must be 1 to {KEY_MAX} characters, not counting surrounding spaces",
            code="bad_idempotency_key",
        )
    fingerprint = hashlib.sha256(
        request.method.encode() + b" " + request.path.encode() + b"\n" + request.body
    ).hexdigest()
    try:
        with transaction.atomic():
            record, created = IdempotencyRecord.objects.get_or_create(
                user=request.user, key=key, defaults={"request_sha256": fingerprint}
            )
    except IntegrityError:  # a concurrent first use won the insert
        record, created = IdempotencyRecord.objects.get(user=request.user, key=key), False
    if not created and record.state == IN_FLIGHT and _abandoned(record):
        created = _take_over(record, fingerprint)
        record.refresh_from_db()
    if not created:
        return _repeat(record, fingerprint)
    return _run_once(record, handler)


def _take_over(record: IdempotencyRecord, fingerprint: str) -> bool:
    """Compare-and-set on the stale claim: of several repeats, one takes the key over."""
    return (
        IdempotencyRecord.objects.filter(pk=record.pk, state=IN_FLIGHT, created_at=record.created_at).update(
            created_at=timezone.now(), request_sha256=fingerprint
        )
        == 1
    )


def _repeat(record: IdempotencyRecord, fingerprint: str) -> Response:
    if record.request_sha256 != fingerprint:
        return problem(
            422,
            "Invalid input",
            f"this {HEADER} was used with a different request",
            code="idempotency_key_reused",
        )
    if record.state == IN_FLIGHT:
        return problem(
            409, "Conflict", f"a request with this {HEADER} is still in progress", code="in_flight"
        )
    replay = Response(record.response_body, status=record.response_status, headers=record.response_headers)
    replay["Idempotent-Replayed"] = "true"
    if record.response_status >= 400:  # a refusal kept before refusals stopped pinning their key
        replay.content_type = "application/problem+json"
    return replay


def _run_once(record: IdempotencyRecord, handler: Callable[[], Response]) -> Response:
    mine = IdempotencyRecord.objects.filter(pk=record.pk, state=IN_FLIGHT, created_at=record.created_at)
    try:
        # The handler's audit rows and events are written after the stored response.
        with atomic_appends_last():
            if not mine.select_for_update().exists():  # taken over while we were slow
                return problem(
                    409, "Conflict", f"a request with this {HEADER} is still in progress", code="in_flight"
                )
            try:
                response = handler()
            except (DeskError, APIException) as exc:
                response = problem_exception_handler(exc, {})
            if _pins_the_key(response):
                mine.update(
                    state=IdempotencyRecord.State.DONE,
                    response_status=response.status_code,
                    response_body=response.data,
                    response_headers={name: response[name] for name in REPLAYED_HEADERS if name in response},
                )
    except Exception:
        mine.delete()  # nothing was committed for it: let the client retry
        raise
    if not _pins_the_key(response):
        mine.delete()
    return response


def _pins_the_key(response: Response) -> bool:
    """Only a success is kept for replay. A 4xx changed nothing (DESIGN.md: bad input gets a
    clear 4xx and changes nothing), so, as Stripe does for a request refused before it ran,
    the key stays free: the client fixes the request, or waits for the state to allow it, and
    sends it again under the same key. A 5xx may be retried too."""
    return response.status_code < 400


def _abandoned(record: IdempotencyRecord) -> bool:
    return record.created_at < timezone.now() - timedelta(seconds=settings.DESK_IDEMPOTENCY_INFLIGHT_SECONDS)
