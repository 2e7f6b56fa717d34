from django.apps import AppConfig
from django.core import checks


class EventsConfig(AppConfig):
    name = "reviewdesk.events"
    label = "events"

    def ready(self) -> None:
        from reviewdesk.events import signals

        signals.connect()
        checks.register(channels_redis_checked)


def channels_redis_checked(**_: object) -> list[checks.CheckMessage]:
    """A channels_redis that events/publish.py was not checked against is an error for
    `manage.py check` and `migrate` (which `make run` runs first); `publisher_for` refuses it
    at the first push too."""
    from reviewdesk.events.publish import channels_redis_problem

    problem = channels_redis_problem()
    return [checks.Error(problem, id="reviewdesk.E001")] if problem else []
