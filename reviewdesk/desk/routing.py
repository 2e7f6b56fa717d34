from django.urls import path

from reviewdesk.desk.consumers import DeskConsumer

websocket_urlpatterns = [path("ws/desk/", DeskConsumer.as_asgi())]
