from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "reviewdesk.runs"
    label = "runs"

    def ready(self) -> None:
        from reviewdesk.runs import checks  # noqa: F401  (registers the system checks)
