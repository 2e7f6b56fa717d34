"""The demo agent's world on Django (DESK_TOOL_WORLD): its email through Django's backend and
its refunds in the DemoRefund table."""
