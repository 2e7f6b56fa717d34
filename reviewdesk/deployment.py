"""Whether this process runs a production configuration: the one rule the desk's production
checks share (a worker refusing signing keys it can read, a writer refusing to make its own
audit key)."""

from __future__ import annotations

import os

from django.conf import settings


def is_production_configuration() -> bool:
    """DEBUG off, not the embedded default (DATABASE_URL or REDIS_URL set), and not a test process.

    The embedded default (`make run`) keeps web and worker on one machine as one user, so the
    worker can read the private key there; a deployment must not.
    """
    embedded = not settings.DATABASE_URL and not settings.REDIS_URL
    return not settings.DEBUG and not embedded and os.environ.get("DESK_TESTING") != "1"
