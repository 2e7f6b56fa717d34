from django.apps import AppConfig


class EventsConfig(AppConfig):
    name = "reviewdesk.events"
    label = "events"

    def ready(self) -> None:
        from reviewdesk.events import signals

        signals.connect()
