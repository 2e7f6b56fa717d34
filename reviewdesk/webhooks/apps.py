from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    name = "reviewdesk.webhooks"
    default_auto_field = "django.db.models.BigAutoField"
