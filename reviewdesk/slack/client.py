"""The Slack Web API through `slack_sdk`, and whether the feature is on at all."""

from __future__ import annotations

from django.conf import settings
from slack_sdk import WebClient


def slack_enabled() -> bool:
    """Both secrets set: without either, nothing is posted and every Slack request is refused."""
    return bool(settings.SLACK_BOT_TOKEN and settings.SLACK_SIGNING_SECRET)


def web_client() -> WebClient:
    base = settings.SLACK_API_URL
    return WebClient(
        token=settings.SLACK_BOT_TOKEN,
        base_url=base if base.endswith("/") else base + "/",
        timeout=settings.DESK_SLACK_TIMEOUT_SECONDS,
        # No retry of the SDK's own: delivery.py retries with backoff, and mails when it gives up.
        retry_handlers=[],
    )
