"""The API's rate limits, applied to the desk's pages that do the same thing.

A page's POST is counted by the API's own throttle class (reviewdesk/api/throttling.py), on
the same Redis counter the API keeps for a session: that class keys a session by its user,
and a page is always a session. So a user alternating between the page and the API's session
spends one budget, not two. (A bearer token has a budget of its own, in the API as here.)
"""

from __future__ import annotations

import math

from django.http import HttpRequest
from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle

_PER = {1: "a second", 60: "a minute", 3600: "an hour", 86400: "a day"}  # DRF's rate periods


def over_limit(request: HttpRequest, throttle: SimpleRateThrottle, *, what: str) -> str | None:
    """Count this POST against `throttle`. None when it is allowed; else the sentence to
    show: the limit and the seconds until the next one would be allowed."""
    # The throttle reads the request as DRF hands it to an API view; a page's session has no
    # token (`auth` None), which is how the API's own session requests look to it.
    as_the_api_sees_it = Request(request)
    as_the_api_sees_it.user, as_the_api_sees_it.auth = request.user, None
    if throttle.allow_request(as_the_api_sees_it, None):
        return None
    wait = math.ceil(throttle.wait() or 1)
    per = _PER.get(throttle.duration or 0, f"in {throttle.duration} s")
    return (
        f"at most {throttle.num_requests} {what} {per}, the page and the API together. Try again in {wait} s."
    )
