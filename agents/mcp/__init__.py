"""MCP servers as tool sources: a server's tools become an agent's gated tools.

    orders = MCPServerStdio(
        "orders", "python", ["-m", "orders_mcp"], env={"ORDERS_TOKEN": env("ORDERS_TOKEN")},
        approval={"lookup_*": NEVER, "*": ALWAYS},
    )
    register(Agent(name="support", system_prompt="...", tools=(), mcp_servers=(orders,)))

Each MCP tool is an ordinary `agents.tools.Tool` whose function sends the `tools/call`: the
gate verifies the decision's signature and arguments, consumes it and writes the ledger row
before that function runs, exactly as for any tool. The official `mcp` SDK speaks the protocol.

Definitions are pinned (the "rug pull" defence). A worker lists a server's tools when a run
needs them and reconciles them with a `PinStore` (the desk's: `reviewdesk.mcp.pins`): the
first sight of a server pins its tools' names, descriptions, input schemas and annotation
hints; the model, the reviewer and an edit's schema check all use the pinned definition. A tool
served differently from its pin, no longer served, or added to a server already seen is
refused with an error the model reads until an admin accepts the new definition. Right before each `tools/call` the worker lists the tools again and sends
nothing unless the served definition is still the pinned one.

Processes: the SDK is async. Each worker process runs one event-loop thread holding its
sessions (started lazily in the process that needs it, so Celery's prefork parent never owns
one); tools call into it synchronously with timeouts. A stdio server is started when a run
first needs it, kept for the process's life and restarted when it stops answering. Web
processes never start a server: they read tool definitions from the pins (`use_pin_store`).

Failure classes (agents/tools.py): a server that cannot be started or reached, or does not
answer the `tools/list` before the call, raises `ToolUnavailable` (nothing was sent: retried
under the budget); `isError` is a `ToolError` the model reads; a failure once the `tools/call`
may have been sent raises `MCPCallInterrupted`, which for an `external` tool makes the ledger
row `unknown` (a human reconciles it).

Modules: `pins` (definitions, digests, the pin store seam), `servers` (declarations) and
`runtime` (the tools built from them and the process's sessions). Import from here.
"""

from agents.mcp.pins import (
    PINNED_HINTS,
    RUNNABLE_STATES,
    TOOL_NAME_PATTERN,
    InMemoryPinStore,
    PinState,
    PinStore,
    ToolDefinition,
    refusal,
    tool_name_acceptable,
)
from agents.mcp.runtime import (
    CONNECT_TIMEOUT_SECONDS,
    IDEMPOTENCY_META_KEY,
    LIST_TIMEOUT_SECONDS,
    RETRY_DOWN_AFTER_SECONDS,
    MCPCallInterrupted,
    check_names,
    close_all,
    mcp_tools,
    prepare_servers,
    probe,
    use_pin_store,
)
from agents.mcp.servers import (
    MCPConfigurationError,
    MCPServer,
    MCPServerHTTP,
    MCPServerStdio,
    definitions_of,
    env,
)
from agents.tools import ALWAYS, NEVER

__all__ = [
    "ALWAYS",
    "CONNECT_TIMEOUT_SECONDS",
    "IDEMPOTENCY_META_KEY",
    "LIST_TIMEOUT_SECONDS",
    "NEVER",
    "PINNED_HINTS",
    "RETRY_DOWN_AFTER_SECONDS",
    "RUNNABLE_STATES",
    "TOOL_NAME_PATTERN",
    "InMemoryPinStore",
    "MCPCallInterrupted",
    "MCPConfigurationError",
    "MCPServer",
    "MCPServerHTTP",
    "MCPServerStdio",
    "PinState",
    "PinStore",
    "ToolDefinition",
    "check_names",
    "close_all",
    "definitions_of",
    "env",
    "mcp_tools",
    "prepare_servers",
    "probe",
    "refusal",
    "tool_name_acceptable",
    "use_pin_store",
]
