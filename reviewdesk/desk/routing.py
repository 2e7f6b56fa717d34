"""The desk's WebSocket route (Channels' name for a socket's URL map; asgi.py mounts it)."""

from django.urls import path

from reviewdesk.desk.consumers import DeskConsumer

websocket_urlpatterns = [path("ws/desk/", DeskConsumer.as_asgi())]
