from django.apps import AppConfig


class SlackConfig(AppConfig):
    name = "reviewdesk.slack"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from reviewdesk.approvals.lifecycle.notify import register_channel
        from reviewdesk.events.services import on_event_written
        from reviewdesk.slack.outbox import SLACK_CHANNEL, stale_on_decision

        # Off (no token or no signing secret): neither hook does anything, nothing else changes.
        register_channel(SLACK_CHANNEL)
        on_event_written(stale_on_decision)
