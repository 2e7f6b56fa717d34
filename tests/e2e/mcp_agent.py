"""An agent module whose tools come from MCP servers only (named in DESK_AGENTS by the e2e
tests of tests/e2e/test_mcp_desk.py): the suite's MCP server over stdio, started by the
worker, and the same server over streamable HTTP at MCP_TEST_HTTP_URL."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from agents.mcp import ALWAYS, NEVER, MCPServerHTTP, MCPServerStdio, env
from agents.registry import Agent, register

SERVER = Path(__file__).resolve().parents[1] / "fixtures" / "mcp_server.py"
APPROVAL = {"lookup_*": NEVER, "*": ALWAYS}  # lookups run at once; anything else asks a human

orders_stdio = MCPServerStdio(
    "orders",
    sys.executable,
    [str(SERVER), "stdio"],
    # Read from the worker's environment when it starts the server: nothing else of it passes.
    env={
        "MCP_CALLS_FILE": env("MCP_TEST_CALLS_FILE"),
        "MCP_DESCRIPTION_FILE": env("MCP_TEST_DESCRIPTION_FILE"),
    },
    approval=APPROVAL,
)
orders_http = MCPServerHTTP(
    "orders-http", os.environ.get("MCP_TEST_HTTP_URL", "http://127.0.0.1:9/mcp"), approval=APPROVAL
)

register(Agent(name="mcp-stdio", system_prompt="Help with orders.", tools=(), mcp_servers=(orders_stdio,)))
register(Agent(name="mcp-http", system_prompt="Help with orders.", tools=(), mcp_servers=(orders_http,)))
