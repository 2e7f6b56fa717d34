"""The stdio proxy: an MCP server (the SDK's lowlevel `Server`) in front of an upstream MCP
server (the SDK's stdio client). It lists the upstream's tools through the pins and sends each
call on, through the desk first when its name matches a `--gate` pattern."""

from __future__ import annotations

import fnmatch
import logging
import sys
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
import mcp_types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from reviewdesk_client.mcp_gateway.pins import PinFile, PinState, Reconciled, refusal, tool_digest

logger = logging.getLogger("reviewdesk_client.mcp_gateway")

# How long the upstream may take to answer a `tools/list`.
LIST_TIMEOUT_SECONDS = 30.0


def is_gated(tool: str, gates: Sequence[str]) -> bool:
    """Every tool goes to the desk unless patterns are given; then those matching them."""
    return not gates or any(fnmatch.fnmatchcase(tool, pattern) for pattern in gates)


def error_result(text: str, meta: dict[str, Any] | None = None) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], is_error=True, _meta=meta
    )


@dataclass(frozen=True)
class UpstreamCall:
    """A call about to go upstream once authorised: `send` sends it (with these arguments or an
    edit's), `served_digest` re-lists the upstream and returns the tool's digest now if it is
    still served as pinned (None otherwise)."""

    tool: str
    arguments: dict[str, Any]
    definition: dict[str, Any]
    digest: str
    send: Callable[[dict[str, Any], dict[str, Any] | None], Awaitable[types.CallToolResult]]
    served_digest: Callable[[], Awaitable[str | None]]


class Gate(Protocol):
    async def run(self, ctx: ServerRequestContext[Any, Any], call: UpstreamCall) -> types.CallToolResult: ...


class Gateway:
    """The handlers of the gateway's MCP server."""

    def __init__(self, upstream: ClientSession, pins: PinFile, gates: Sequence[str], gate: Gate) -> None:
        self.upstream = upstream
        self.pins = pins
        self.gates = tuple(gates)
        self.gate = gate

    async def served(self) -> list[dict[str, Any]]:
        """The upstream's tools (every page) as wire dicts."""
        with anyio.fail_after(LIST_TIMEOUT_SECONDS):
            listing = await self.upstream.list_tools()
            tools = list(listing.tools)
            while listing.next_cursor:
                listing = await self.upstream.list_tools(
                    params=types.PaginatedRequestParams(cursor=listing.next_cursor)
                )
                tools += listing.tools
        return [tool.model_dump(by_alias=True, mode="json", exclude_none=True) for tool in tools]

    async def reconcile(self) -> Reconciled:
        reconciled = self.pins.reconcile(await self.served())
        for change in reconciled.changes:
            logger.warning("refusing %s", change.describe())
        return reconciled

    async def list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        reconciled = await self.reconcile()
        return types.ListToolsResult(tools=[types.Tool.model_validate(t) for t in reconciled.tools])

    async def call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        name, arguments = params.name, dict(params.arguments or {})
        reconciled = await self.reconcile()
        state = reconciled.states.get(name)
        if state is None:
            return error_result(f"the MCP tool {name} is not served by this gateway")
        if state not in (PinState.PINNED, PinState.NEW):
            return error_result(refusal(name, state))
        definition = next(t for t in reconciled.tools if t["name"] == name)
        if not is_gated(name, self.gates):
            return await self._send(name, arguments, None)
        call = UpstreamCall(
            tool=name,
            arguments=arguments,
            definition=definition,
            digest=tool_digest(definition),
            send=lambda args, meta: self._send(name, args, meta),
            served_digest=lambda: self._served_digest(name),
        )
        return await self.gate.run(ctx, call)

    async def _served_digest(self, name: str) -> str | None:
        reconciled = await self.reconcile()
        if not reconciled.runnable(name):
            return None
        return tool_digest(next(t for t in reconciled.tools if t["name"] == name))

    async def _send(
        self, name: str, arguments: dict[str, Any], meta: dict[str, Any] | None
    ) -> types.CallToolResult:
        # The upstream's own answer, unchanged (an error it raises reaches the client as is).
        return await self.upstream.call_tool(name, arguments, meta=meta)


class Ungated:
    """The gate of a gateway with no desk: refuses every gated call (used by `--accept`)."""

    async def run(self, ctx: ServerRequestContext[Any, Any], call: UpstreamCall) -> types.CallToolResult:
        return error_result(f"the MCP tool {call.tool} needs a reviewer and no desk is configured")


def upstream_parameters(command: Sequence[str], env: dict[str, str]) -> StdioServerParameters:
    """The upstream process: the SDK's safe default environment (HOME, PATH, USER, ...) plus
    what `--env` names. The desk's token and keys never reach it."""
    return StdioServerParameters(command=command[0], args=list(command[1:]), env=env)


async def open_upstream(stack: AsyncExitStack, parameters: StdioServerParameters) -> ClientSession:
    read, write = await stack.enter_async_context(stdio_client(parameters, errlog=sys.stderr))
    session = await stack.enter_async_context(ClientSession(read, write))
    with anyio.fail_after(LIST_TIMEOUT_SECONDS):
        await session.initialize()
    return session


async def serve(name: str, gateway: Gateway, instructions: str | None = None) -> None:
    """Serve `gateway` over this process's stdin and stdout until the client closes them."""
    server: Server[Any] = Server(
        name,
        version="1",
        instructions=instructions,
        on_list_tools=gateway.list_tools,
        on_call_tool=gateway.call_tool,
    )
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())
