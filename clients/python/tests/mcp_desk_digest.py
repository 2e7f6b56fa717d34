"""Run by the desk's own Python (never imported by the client): the desk's digest of each tool
definition (agents.mcp.ToolDefinition.digest). Reads a JSON list of tools as MCP serves them
(camelCase keys) on stdin, writes a JSON list of hex digests."""

from __future__ import annotations

import json
import sys

from agents.mcp import ToolDefinition


def main() -> None:
    digests = []
    for tool in json.load(sys.stdin):
        definition = ToolDefinition.from_dict({"server": "gateway", **tool})
        digests.append(definition.digest)
    json.dump(digests, sys.stdout)


if __name__ == "__main__":
    main()
