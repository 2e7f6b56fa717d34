from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    name = "reviewdesk.webhooks"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from reviewdesk.events.services import on_event_written
        from reviewdesk.webhooks.services import dispatch_on_commit

        on_event_written(dispatch_on_commit)
