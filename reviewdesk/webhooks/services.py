"""Register webhooks, turn desk events into deliveries, sign and send them.

Owner scoping: an endpoint receives only events of runs its owner submitted, written after it
was registered. Deliveries are made from the desk's event log after a cursor, as the SSE
stream reads it (`webhooks_dispatch`): the deliveries and the cursor's move commit together,
so a crash loses none and makes none twice. A dispatch is sent when an event that a webhook may
hear of commits and its run's submitter has an endpoint; beat's sweep dispatches too, so a lost
nudge delays deliveries, never loses them. Each delivery's task is enqueued on commit.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from datetime import timedelta
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from reviewdesk.approvals.reads.representation import approval_for
from reviewdesk.audit.services import audit_record
from reviewdesk.celery import app as celery_app
from reviewdesk.events.models import DeskEvent
from reviewdesk.events.services import latest_seq
from reviewdesk.lib.db import serialize_writers
from reviewdesk.lib.errors import Invalid, NotFound
from reviewdesk.lib.times import rfc3339_sortable
from reviewdesk.webhooks.addresses import pinned, resolve_target, url_refusal
from reviewdesk.webhooks.models import (
    DeliveryStatus,
    DispatchCursor,
    WebhookAttempt,
    WebhookDelivery,
    WebhookEndpoint,
    WebhookEvent,
)
from reviewdesk.webhooks.rows import endpoints_of_submitter, submitter_has_live_endpoint

if TYPE_CHECKING:
    from django.contrib.auth.models import User

DELIVER_TASK = "webhooks.deliver"
DISPATCH_TASK = "webhooks.dispatch"
# Events turned into deliveries per transaction: a backlog is worked through a page at a time.
DISPATCH_PAGE_SIZE = 500
SIGNATURE_HEADER = "Desk-Signature"
MAX_ENDPOINTS_PER_OWNER = 20

RUN_STATUS_EVENTS = {
    "input_required": WebhookEvent.RUN_INPUT_REQUIRED,
    "succeeded": WebhookEvent.RUN_SUCCEEDED,
    "failed": WebhookEvent.RUN_FAILED,
    "cancelled": WebhookEvent.RUN_CANCELLED,
}
DECIDED = ("approved", "rejected")
ENDED_UNDECIDED = ("expired", "cancelled")


# --- Signing -------------------------------------------------------------------------------
def signature_header(*, secret: str, body: bytes, at: int | None = None) -> str:
    """`t=UNIX,v1=HEX`, HEX = HMAC-SHA256(secret, f"{t}." + body)."""
    t = int(time.time()) if at is None else at
    digest = hmac.new(secret.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={t},v1={digest}"


def signature_valid(*, secret: str, body: bytes, header: str, tolerance: int = 300) -> bool:
    """What a receiver runs: the HMAC matches and the timestamp is within `tolerance` seconds."""
    try:
        parts = dict(item.split("=", 1) for item in header.split(","))
        t = int(parts["t"])
    except (ValueError, KeyError):
        return False
    if abs(time.time() - t) > tolerance:
        return False
    expected = signature_header(secret=secret, body=body, at=t).split("v1=", 1)[1]
    return hmac.compare_digest(expected, parts.get("v1", ""))


# --- Registration --------------------------------------------------------------------------
def webhook_register(*, owner: User, url: str, events: list[str]) -> tuple[WebhookEndpoint, str]:
    """A new endpoint and its secret (the only time the secret leaves the server)."""
    if refusal := url_refusal(url):
        raise Invalid(refusal, errors={"url": [refusal]})
    if WebhookEndpoint.objects.filter(owner=owner).count() >= MAX_ENDPOINTS_PER_OWNER:
        message = f"at most {MAX_ENDPOINTS_PER_OWNER} webhooks per user"
        raise Invalid(message, errors={"url": [message]})
    secret = "whsec_" + secrets.token_urlsafe(32)
    with transaction.atomic():
        # Under the writers' lock, the newest event is the newest committed: a writer that had
        # inserted one and not yet committed is waited for, so its event is before `since_seq`.
        serialize_writers()
        endpoint = WebhookEndpoint.objects.create(
            owner=owner, url=url, events=sorted(set(events)), secret=secret, since_seq=latest_seq()
        )
        audit_record(
            actor=owner,
            action="webhook.created",
            subject_type="webhook",
            subject_id=endpoint.id,
            data={"url": url, "events": endpoint.events},
        )
    return endpoint, secret


def webhook_delete(*, webhook_id, owner: User) -> None:
    """Delete the owner's webhook and its delivery history; nothing more is sent to it
    (a queued delivery task finds no row and skips). The endpoint's row is locked first: a
    dispatch holding it (`rows.endpoints_of_submitter`) commits its deliveries before the
    delete gathers them, rather than after, where they would break the foreign key."""
    with transaction.atomic():
        endpoint = webhook_get_for_owner(webhook_id=webhook_id, owner=owner, lock=True)
        audit_record(
            actor=owner,
            action="webhook.deleted",
            subject_type="webhook",
            subject_id=endpoint.id,
            data={"url": endpoint.url, "events": endpoint.events},
        )
        endpoint.delete()


def webhook_get_for_owner(*, webhook_id, owner: User, lock: bool = False) -> WebhookEndpoint:
    endpoints = WebhookEndpoint.objects.filter(pk=webhook_id, owner=owner)
    endpoint = (endpoints.select_for_update() if lock else endpoints).first()
    if endpoint is None:
        raise NotFound("no such webhook")
    return endpoint


# --- From desk events to deliveries --------------------------------------------------------
def webhook_event_type(event: DeskEvent) -> str | None:
    status = (event.data or {}).get("status")
    if event.type == "run.updated":
        if "follow_up" in (event.data or {}):
            return WebhookEvent.RUN_FOLLOW_UP
        return RUN_STATUS_EVENTS.get(status)
    if event.type == "approval.updated" and status in DECIDED:
        return WebhookEvent.APPROVAL_DECIDED
    if event.type == "approval.updated" and status in ENDED_UNDECIDED:
        return WebhookEvent.APPROVAL_ENDED
    return None


def webhooks_dispatch() -> int:
    """Turn the desk events written since the cursor into deliveries, a page per transaction;
    how many deliveries were made. Idempotent under duplicate tasks: the cursor's row lock
    serialises dispatches, and each moves it past the events it turned into deliveries.

    The end of the log is read before its rows: writers serialise, so event ids are commit
    order and every id up to the end has committed (an event committing later is read by the
    next dispatch, which its commit sends)."""
    made = 0
    while True:
        with transaction.atomic():
            cursor, _ = DispatchCursor.objects.select_for_update().get_or_create(pk=1)
            end = latest_seq()
            if end <= cursor.seq:  # nothing new: an idle sweep reads no more and writes nothing
                return made
            if not WebhookEndpoint.objects.filter(disabled_at__isnull=True).exists():
                # Nobody listens: the log up to `end` has no reader (an endpoint registered
                # after `end` was read hears only of later events, its since_seq says).
                DispatchCursor.objects.filter(pk=cursor.pk).update(seq=max(cursor.seq, end))
                return made
            events = list(
                DeskEvent.objects.filter(id__gt=cursor.seq, id__lte=end, type__in=WEBHOOK_SOURCES)
                .exclude(run=None)
                .order_by("id")[:DISPATCH_PAGE_SIZE]
            )
            for event in events:
                made += len(_deliveries_for(event))
            full = len(events) == DISPATCH_PAGE_SIZE
            cursor.seq = events[-1].id if full else end
            cursor.save(update_fields=["seq"])
        if not full:
            return made


# The desk events a webhook may be told of (`webhook_event_type` says which of them it is).
WEBHOOK_SOURCES = ("run.updated", "approval.updated")


def dispatch_on_commit(event: DeskEvent) -> None:
    """As a desk event is written (`events.services.on_event_written`): when a webhook may hear
    of it (its run's submitter has a live endpoint registered before it), send a dispatch once
    the event commits. Asked in the writer's transaction, one statement under the writers' lock:
    asked after the commit, it would be a transaction of its own on every run's step
    (tests/reviewdesk/runs/test_statement_budget.py). Beat's sweep dispatches what a lost task
    leaves."""
    if webhook_event_type(event) is None or event.run_id is None:
        return
    if submitter_has_live_endpoint(event.run_id, event.id):
        transaction.on_commit(lambda: celery_app.send_task(DISPATCH_TASK), robust=True)


def _deliveries_for(event: DeskEvent) -> list[WebhookDelivery]:
    """One delivery per subscribed endpoint of the run's submitter registered before the event,
    each sent by a task enqueued once the transaction commits."""
    webhook_type = webhook_event_type(event)
    if webhook_type is None or event.run_id is None:
        return []
    endpoints, owner = endpoints_of_submitter(event.run_id)
    endpoints = [e for e in endpoints if webhook_type in e.events and e.since_seq < event.id]
    if not endpoints:
        return []
    # The owner reads an approval as the desk would show it to them: a hand-over's note only
    # where the rule lets them read it (`approval_for`), never by being the submitter.
    data = event.data
    if event.type.startswith("approval.") and data:
        username, admin = owner
        data = approval_for(data, username=username, admin=admin)
    deliveries = []
    for endpoint in endpoints:
        delivery = WebhookDelivery(
            endpoint=endpoint, event_type=webhook_type, event_seq=event.id, due_at=timezone.now()
        )
        delivery.body = json.dumps(
            {
                "id": str(delivery.id),
                "type": webhook_type,
                "seq": event.id,
                "run": str(event.run_id),
                "created_at": rfc3339_sortable(event.created_at),
                "data": data,
            },
            separators=(",", ":"),
        )
        delivery.save()
        deliveries.append(delivery)
    for delivery in deliveries:
        _enqueue_on_commit(delivery.id)
    return deliveries


def _enqueue_on_commit(delivery_id, countdown: float = 0) -> None:
    def send() -> None:
        celery_app.send_task(DELIVER_TASK, args=[str(delivery_id)], countdown=countdown or None)

    transaction.on_commit(send, robust=True)


def webhook_resend(*, webhook_id, delivery_id, owner: User) -> WebhookDelivery:
    """A new delivery of the same body, sent now. Allowed on a disabled endpoint: a success
    re-enables it (the owner fixed the receiver and proved it)."""
    endpoint = webhook_get_for_owner(webhook_id=webhook_id, owner=owner)
    original = WebhookDelivery.objects.filter(pk=delivery_id, endpoint=endpoint).first()
    if original is None:
        raise NotFound("no such delivery")
    with transaction.atomic():
        delivery = WebhookDelivery.objects.create(
            endpoint=endpoint,
            event_type=original.event_type,
            event_seq=original.event_seq,
            body=original.body,
            resend_of=original,
            due_at=timezone.now(),
        )
        _enqueue_on_commit(delivery.id)
    return delivery


# --- Sending -------------------------------------------------------------------------------
def _backoff(attempt: int) -> float:
    return settings.DESK_WEBHOOK_BACKOFF_SECONDS * (2 ** (attempt - 1))


def webhook_deliver(*, delivery_id) -> str:
    """One attempt of one delivery; schedules the next with exponential backoff on failure.

    Idempotent under duplicate tasks: the attempt number is claimed by compare-and-set.
    """
    import httpx

    delivery = WebhookDelivery.objects.select_related("endpoint__owner").filter(pk=delivery_id).first()
    if delivery is None or delivery.status != DeliveryStatus.PENDING:
        return "skipped"
    endpoint = delivery.endpoint
    if not endpoint.owner.is_active:  # deactivated since it was queued, a resend included
        _finish(delivery, DeliveryStatus.FAILED)
        return "owner deactivated"
    if endpoint.disabled_at is not None and delivery.resend_of_id is None:
        _finish(delivery, DeliveryStatus.FAILED)
        return "endpoint disabled"
    number = delivery.attempts + 1
    now = timezone.now()
    lease = timedelta(seconds=settings.DESK_WEBHOOK_TIMEOUT_SECONDS + 30)
    claimed = (
        WebhookDelivery.objects.filter(
            pk=delivery.pk, status=DeliveryStatus.PENDING, attempts=delivery.attempts
        )
        .filter(Q(leased_until__isnull=True) | Q(leased_until__lt=now))
        .update(attempts=number, leased_until=now + lease)
    )
    if not claimed:
        return "skipped"
    status_code, error = None, ""
    started = time.monotonic()
    refusal, address = resolve_target(endpoint.url)
    if refusal or address is None:
        error = "refused: " + (refusal or "the host has no address")
    else:
        body = delivery.body.encode()
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "ReviewDesk-Webhooks/1",
            "Desk-Delivery": str(delivery.id),
            "Desk-Event": delivery.event_type,
            SIGNATURE_HEADER: signature_header(secret=endpoint.secret, body=body),
        }
        target, host_header, extensions = pinned(endpoint.url, address)
        try:
            with httpx.Client(
                timeout=settings.DESK_WEBHOOK_TIMEOUT_SECONDS, follow_redirects=False
            ) as client:
                response = client.post(
                    target, content=body, headers={**headers, **host_header}, extensions=extensions
                )
            status_code = response.status_code
            if not 200 <= status_code < 300:
                error = f"HTTP {status_code}"
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}"[:500]
    retry_in = _backoff(number)
    WebhookDelivery.objects.filter(pk=delivery.pk).update(
        leased_until=None, due_at=timezone.now() + timedelta(seconds=retry_in)
    )
    WebhookAttempt.objects.create(
        delivery=delivery,
        number=number,
        status_code=status_code,
        error=error,
        duration_ms=int((time.monotonic() - started) * 1000),
    )
    if not error:
        _finish(delivery, DeliveryStatus.DELIVERED)
        _count_success(endpoint)
        return "delivered"
    if number < settings.DESK_WEBHOOK_MAX_ATTEMPTS and not error.startswith("refused"):
        with transaction.atomic():
            _enqueue_on_commit(delivery.id, countdown=retry_in)
        return "retrying"
    _finish(delivery, DeliveryStatus.FAILED)
    _count_failure(endpoint, error)
    return "failed"


def _finish(delivery: WebhookDelivery, status: str) -> None:
    WebhookDelivery.objects.filter(pk=delivery.pk, status=DeliveryStatus.PENDING).update(
        status=status, finished_at=timezone.now()
    )


def _count_success(endpoint: WebhookEndpoint) -> None:
    """A success resets the failure count and revives a disabled endpoint (a re-send proved the
    receiver fixed). Revived, it hears of what is written from now on, as a new registration
    does: what was written while it was disabled was never its to hear (its state is judged at
    dispatch, which may not have reached those events yet)."""
    if WebhookEndpoint.objects.filter(pk=endpoint.pk, disabled_at__isnull=True).update(
        consecutive_failures=0
    ):
        return
    with transaction.atomic():
        serialize_writers()  # as webhook_register: an event waiting to commit is before the end
        WebhookEndpoint.objects.filter(pk=endpoint.pk).update(
            consecutive_failures=0, disabled_at=None, disabled_reason="", since_seq=latest_seq()
        )


def _count_failure(endpoint: WebhookEndpoint, error: str) -> None:
    WebhookEndpoint.objects.filter(pk=endpoint.pk).update(consecutive_failures=F("consecutive_failures") + 1)
    limit = settings.DESK_WEBHOOK_DISABLE_AFTER
    WebhookEndpoint.objects.filter(
        pk=endpoint.pk, disabled_at__isnull=True, consecutive_failures__gte=limit
    ).update(
        disabled_at=timezone.now(),
        disabled_reason=f"{limit} deliveries in a row failed; the last: {error}"[:500],
    )
