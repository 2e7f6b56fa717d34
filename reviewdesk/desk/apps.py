from django.apps import AppConfig


class DeskConfig(AppConfig):
    name = "reviewdesk.desk"
    label = "desk"
