from django.urls import path

from reviewdesk.mcp import views

urlpatterns = [
    path("", views.pins_page, name="mcp-pins"),
    path("<str:server>/<str:tool>/accept/", views.pin_accept_post, name="mcp-pin-accept"),
]
