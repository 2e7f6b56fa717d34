"""The desk's ASGI app with the harness's probe: what `make bench` serves."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reviewdesk.settings")

from bench import probe
from reviewdesk.asgi import application

probe.install("web")

__all__ = ["application"]
