"""The MCP gateway: an upstream MCP server's tools, served over stdio, gated by the desk.

    python -m reviewdesk_client.mcp_gateway --desk URL --name NAME [--gate PATTERN]... -- COMMAND [ARGS...]

See docs/clients/mcp-gateway.md.
"""

from reviewdesk_client.mcp_gateway.cli import main
from reviewdesk_client.mcp_gateway.pins import PinFile, PinState, tool_digest
from reviewdesk_client.mcp_gateway.proxy import Gateway, is_gated

__all__ = ["Gateway", "PinFile", "PinState", "is_gated", "main", "tool_digest"]
