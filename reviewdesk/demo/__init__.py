"""The demo agent's world on Django: its email through Django's backend and its refunds in the
DemoRefund table. `agents.demo` names it in its TOOL_WORLD, so it is the world while DESK_AGENTS
loads the demo (DESK_TOOL_WORLD overrides it). Installed whatever DESK_AGENTS says, so that
its migrations (app label `demo`) never depend on the agents a process loads."""
