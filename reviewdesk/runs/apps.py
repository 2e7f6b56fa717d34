from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "reviewdesk.runs"
    label = "runs"

    def ready(self) -> None:
        from agents.mcp import PinStore, use_pin_store
        from reviewdesk.runs import checks  # noqa: F401  (registers the system checks)

        def pins() -> PinStore:
            from reviewdesk.runs.host import desk_pin_store

            return desk_pin_store()

        # Web processes, beat and commands read MCP tools from the pins; they start no server.
        use_pin_store(pins)
