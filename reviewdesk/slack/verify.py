"""Is this request from Slack, now, and the first time? Signature (the SDK's verifier over
`v0:{timestamp}:{body}` with the signing secret), the timestamp within
DESK_SLACK_REQUEST_MAX_AGE_SECONDS, and the signature never seen before: a request captured and
sent again (within the window, where its signature still holds) is refused."""

from __future__ import annotations

import hashlib
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.http import HttpRequest
from django.utils import timezone
from slack_sdk.signature import SignatureVerifier

from reviewdesk.slack.client import slack_enabled
from reviewdesk.slack.models import SlackRequestSeen


class NotFromSlack(Exception):
    """Refused before anything is read from the body: `reason` says which check failed."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Clock:
    def now(self) -> float:
        return timezone.now().timestamp()


def request_verify(request: HttpRequest) -> None:
    """Raise NotFromSlack unless `request` is signed by Slack, fresh and new. A request that
    passes is recorded, in its own transaction, before anything acts on it."""
    if not slack_enabled():
        raise NotFromSlack("Slack is not configured on this desk")
    timestamp = request.headers.get("X-Slack-Request-Timestamp", "")
    signature = request.headers.get("X-Slack-Signature", "")
    if not timestamp.isascii() or not timestamp.isdigit() or not signature:
        raise NotFromSlack("unsigned")
    if abs(timezone.now().timestamp() - int(timestamp)) > settings.DESK_SLACK_REQUEST_MAX_AGE_SECONDS:
        raise NotFromSlack("stale timestamp")
    verifier = SignatureVerifier(settings.SLACK_SIGNING_SECRET, clock=_Clock())
    expected = verifier.generate_signature(timestamp=timestamp, body=request.body)
    if expected is None or not verifier.is_valid(body=request.body, timestamp=timestamp, signature=signature):
        raise NotFromSlack("bad signature")
    digest = hashlib.sha256(signature.encode()).hexdigest()
    try:
        with transaction.atomic():
            SlackRequestSeen.objects.create(signature_sha256=digest, seen_at=timezone.now())
    except IntegrityError:
        raise NotFromSlack("replayed") from None


def seen_prune() -> int:
    """Forget signatures older than the window: a replay of one fails the timestamp check."""
    cutoff = timezone.now() - timedelta(seconds=2 * settings.DESK_SLACK_REQUEST_MAX_AGE_SECONDS)
    deleted, _ = SlackRequestSeen.objects.filter(seen_at__lt=cutoff).delete()
    return deleted
