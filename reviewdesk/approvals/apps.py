from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "reviewdesk.approvals"
    label = "approvals"
