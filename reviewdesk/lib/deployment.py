"""Whether this process runs a production configuration: the one rule the desk's production
checks share (a worker refusing signing keys it can read, a writer refusing to make its own
audit key), and how a process refuses to start over one."""

from __future__ import annotations

import os
import sys
from typing import NoReturn

from django.conf import settings

EX_CONFIG = 78  # sysexits.h: a configuration error


def refuse_to_start(process: str, problem: str) -> NoReturn:
    """Say why on stderr and exit with EX_CONFIG, which tells a configuration error from a crash
    (systemd's RestartPreventExitStatus=78 stops a restart loop on it)."""
    print(f"reviewdesk {process} refuses to start: {problem}", file=sys.stderr)
    raise SystemExit(EX_CONFIG)


def is_production_configuration() -> bool:
    """DEBUG off, not the embedded default (DATABASE_URL or REDIS_URL set), and not a test process.

    The embedded default (`make run`) keeps web and worker on one machine as one user, so the
    worker can read the private key there; a deployment must not.
    """
    embedded = not settings.DATABASE_URL and not settings.REDIS_URL
    return not settings.DEBUG and not embedded and os.environ.get("DESK_TESTING") != "1"
