"""Per-token rate limits on submit and decide (429 `throttled`, with Retry-After).

Counted in Redis (the `throttle` cache), not Django's default cache: that one is a local
memory cache, one per process, so with two daphne processes and several workers' worth of
web traffic a client would get N times its limit. Redis is shared by every web process, so the
limit holds across them. DRF's sliding-window throttle keeps a list of request times per key:
a read-modify-write, so two requests racing at the very edge may both pass (off by one at most
per racing pair); it is a brake on runaway clients, not an accounting ledger.

The key is the bearer token's id (each token its own budget), or the user's id for a session.
`DESK_RATE_SUBMIT` / `DESK_RATE_DECIDE` / `DESK_RATE_RESEND` (webhook re-sends, 30/min) are DRF
rates ("60/min", "1000/hour"); empty turns the limit off. Only POST is counted.
"""

from __future__ import annotations

import functools

from django.conf import settings
from django.core.cache import BaseCache, caches
from django.core.signals import setting_changed
from django.dispatch import receiver
from rest_framework.throttling import SimpleRateThrottle

from reviewdesk.accounts.models import ApiToken


@functools.cache
def throttle_cache() -> BaseCache:
    """One `throttle` cache for the whole process. `caches["throttle"]` is a new object in each
    new context, and under ASGI every request is one (Django ticket #35651); a RedisCache made
    afresh opens a connection of its own, so each POST paid a TCP connect to Redis and left a
    socket for the garbage collector. redis-py's connection pool is thread-safe: one serves all."""
    return caches.create_connection("throttle")


@receiver(setting_changed)
def _forget_the_throttle_cache(*, setting: str, **kwargs) -> None:
    # A test that changes CACHES gets a throttle on the new configuration, not the first one.
    if setting == "CACHES":
        throttle_cache.cache_clear()


class TokenRateThrottle(SimpleRateThrottle):
    setting = ""
    default = ""  # the rate when settings do not name one (a limit added after settings.py's)

    def __init__(self):
        self.cache = throttle_cache()
        super().__init__()

    def get_rate(self) -> str | None:
        return getattr(settings, self.setting, self.default) or None

    def get_cache_key(self, request, view) -> str | None:
        if request.method != "POST" or not (request.user and request.user.is_authenticated):
            return None
        who = f"token:{request.auth.pk}" if isinstance(request.auth, ApiToken) else f"user:{request.user.pk}"
        return f"{self.scope}:{who}"


class SubmitThrottle(TokenRateThrottle):
    scope, setting = "submit", "DESK_RATE_SUBMIT"


class DecideThrottle(TokenRateThrottle):
    scope, setting = "decide", "DESK_RATE_DECIDE"


class ResendThrottle(TokenRateThrottle):
    """Webhook re-sends: each queues a delivery of up to DESK_WEBHOOK_MAX_ATTEMPTS POSTs to the
    owner's receiver, so a loop of re-sends would have the desk flood a URL of the client's
    choosing. A person fixing a receiver re-sends a few; a client catching up after an outage
    is paced by Retry-After."""

    scope, setting, default = "resend", "DESK_RATE_RESEND", "30/min"
