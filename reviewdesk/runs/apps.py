from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "reviewdesk.runs"
    label = "runs"
