from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "reviewdesk.audit"
    label = "audit"
