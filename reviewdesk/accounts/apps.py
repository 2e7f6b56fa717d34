from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "reviewdesk.accounts"
    label = "accounts"
