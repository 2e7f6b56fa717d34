from django.apps import AppConfig


class EventsConfig(AppConfig):
    name = "reviewdesk.events"
    label = "events"
