from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "reviewdesk.audit"
    label = "audit"

    def ready(self) -> None:
        from reviewdesk.audit import checks  # noqa: F401  (registers the system checks)
