from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "reviewdesk.api"
    label = "api"
