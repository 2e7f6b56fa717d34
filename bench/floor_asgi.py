"""A bare consumer on the desk's channel layer: joins one group, forwards what it gets."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reviewdesk.settings")

import django

django.setup()

from channels.generic.websocket import AsyncWebsocketConsumer  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import path  # noqa: E402

FLOOR_GROUP = "bench.floor"


class BareConsumer(AsyncWebsocketConsumer):
    group = FLOOR_GROUP

    async def connect(self) -> None:
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code) -> None:
        await self.channel_layer.group_discard(self.group, self.channel_name)

    async def floor_message(self, message) -> None:
        await self.send(text_data=message["text"])


application = ProtocolTypeRouter({"websocket": URLRouter([path("ws/floor/", BareConsumer.as_asgi())])})
