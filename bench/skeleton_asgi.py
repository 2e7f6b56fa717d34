"""The skeleton (bench/skeleton.py) served as the desk is: daphne, the desk's settings and
middleware (DJANGO_SETTINGS_MODULE=bench.skeleton_settings: the desk's, with the skeleton's
two views added to its URLconf), and a bare consumer on the skeleton's socket."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.skeleton_settings")

from reviewdesk.serve.asgi_handler import get_asgi_application

django_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import path, re_path  # noqa: E402

from bench import skeleton_tasks as skeleton  # noqa: E402
from bench.floor_asgi import BareConsumer  # noqa: E402


class SkeletonConsumer(BareConsumer):
    group = skeleton.GROUP


application = ProtocolTypeRouter(
    {
        "http": URLRouter([re_path(r"", django_app)]),
        "websocket": URLRouter([path("ws/skeleton/", SkeletonConsumer.as_asgi())]),
    }
)
