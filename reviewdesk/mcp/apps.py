from django.apps import AppConfig


class McpConfig(AppConfig):
    name = "reviewdesk.mcp"
    label = "mcp"
