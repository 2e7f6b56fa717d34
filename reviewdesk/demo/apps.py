from django.apps import AppConfig


class DemoConfig(AppConfig):
    name = "reviewdesk.demo"
    label = "demo"
