"""The process's side of MCP: the tools an agent gets from its servers, and the per-process
event loop holding the sessions their calls go through (started lazily, one per process, never
in Celery's prefork parent). Web processes never start a server: they build tools from the pins
(`use_pin_store`)."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import AsyncExitStack
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar, cast

import jsonschema

from agents.mcp.pins import RUNNABLE_STATES, PinState, PinStore, ToolDefinition, refusal
from agents.mcp.servers import (
    MCPConfigurationError,
    MCPServer,
    MCPServerStdio,
    _resolved,
    definitions_of,
)
from agents.tools import NEVER, Effect, Tool, ToolContext, ToolError, ToolSource, ToolUnavailable

if TYPE_CHECKING:
    from mcp import ClientSession
    from mcp_types import RequestParamsMeta

logger = logging.getLogger(__name__)

# How long starting a server (spawn or connect, then `initialize`) may take.
CONNECT_TIMEOUT_SECONDS = 15.0
# How long a `tools/list` may take (before each call, and at discovery).
LIST_TIMEOUT_SECONDS = 10.0
# After a server failed to start or answer, runs use its pinned tools without trying it again
# for this long: a server that is down does not slow every run of the agent.
RETRY_DOWN_AFTER_SECONDS = 30.0
# The idempotency key travels to the server in the call's `_meta` under this name.
IDEMPOTENCY_META_KEY = "io.reviewdesk/idempotency-key"


class MCPCallInterrupted(Exception):
    """The `tools/call` may have reached the server before the connection failed or the
    time ran out: its outcome is unknown (an `external` tool's ledger row becomes `unknown`)."""


# --- The tools an agent gets from its servers ------------------------------------------------


@dataclass(frozen=True)
class _SendCall:
    """The function of an MCP tool: checks the served definition is still the pinned one,
    then sends the `tools/call`. The gate runs it only once the call is authorised."""

    server: MCPServer
    definition: ToolDefinition

    def __call__(self, arguments: dict[str, Any], ctx: ToolContext) -> Any:
        return _runtime().call(self.server, self.definition, arguments, ctx)


def _refuse(message: str) -> Callable[[dict[str, Any], ToolContext], Any]:
    def refuse(arguments: dict[str, Any], ctx: ToolContext) -> Any:
        raise ToolError(message)

    return refuse


_OPEN_SCHEMA: dict[str, Any] = {"type": "object"}


def _build_tool(server: MCPServer, definition: ToolDefinition, state: PinState) -> Tool:
    name = server.tool_name(definition.name)
    schema = definition.input_schema
    problem: str | None = None
    if state not in RUNNABLE_STATES:
        problem = refusal(name, state)
    else:
        try:
            jsonschema.Draft202012Validator.check_schema(schema)
        except jsonschema.SchemaError as exc:
            problem = f"the MCP tool {name}'s input schema is not valid JSON Schema: {exc.message}"
    if problem is not None:
        # Refused before anything is sent: a read that asks no one and only says why. The
        # gate asks the real tool's policy again if the state changes before it runs.
        try:
            jsonschema.Draft202012Validator.check_schema(schema)
        except jsonschema.SchemaError:
            schema = _OPEN_SCHEMA
        return _with_source(
            Tool(
                name=name,
                description=definition.description,
                parameters=schema,
                effect=Effect.READ,
                func=_refuse(problem),
                approval=NEVER,
            ),
            server,
            definition,
        )
    return _with_source(
        Tool(
            name=name,
            description=definition.description,
            parameters=schema,
            effect=server.effect_for(definition),
            func=_SendCall(server, definition),
            approval=server.policy_for(definition.name),
        ),
        server,
        definition,
    )


def _with_source(tool: Tool, server: MCPServer, definition: ToolDefinition) -> Tool:
    """The tool marked as served by `server` under the pin `definition` (`manage.py agents`)."""
    return replace(tool, source=ToolSource(kind="mcp", name=server.name, pin=definition.digest))


_DEFAULT_PINS: Callable[[], PinStore] | None = None


def use_pin_store(factory: Callable[[], PinStore] | None) -> None:
    """Where a process that runs no MCP session (a web process, beat, a command) reads the
    pinned definitions from; the desk sets it when its apps are ready."""
    global _DEFAULT_PINS
    _DEFAULT_PINS = factory


def mcp_tools(servers: Sequence[MCPServer]) -> tuple[Tool, ...]:
    """The tools these servers give an agent in this process: from the worker's last look at
    each server where it has one, else from the pins (`use_pin_store`); none without either."""
    runtime = _RUNTIME if _RUNTIME is not None and _RUNTIME.pid == os.getpid() else None
    tools: list[Tool] = []
    for server in servers:
        view = runtime.views.get(server._connect_key()) if runtime is not None else None
        if view is not None:
            tools += view.tools
        elif _DEFAULT_PINS is not None:
            tools += [_cached_tool(server, d, PinState.PINNED) for d in _DEFAULT_PINS().pinned(server.name)]
    return tuple(tools)


_TOOL_CACHE: dict[tuple[int, str, str, PinState], Tool] = {}


def _cached_tool(server: MCPServer, definition: ToolDefinition, state: PinState) -> Tool:
    """A Tool per (server, definition, state): compiling its schema once, not on every lookup."""
    key = (server._connect_key(), definition.name, definition.digest, state)
    tool = _TOOL_CACHE.get(key)
    if tool is None:
        tool = _TOOL_CACHE[key] = _build_tool(server, definition, state)
    return tool


def check_names(agent_name: str, static: Sequence[Tool], servers: Sequence[MCPServer]) -> None:
    """Raise MCPConfigurationError naming both when two tools of the agent share a name."""
    seen: dict[str, str] = {tool.name: f"tool {tool.name!r} of agent {agent_name}" for tool in static}
    for server in servers:
        for tool in mcp_tools((server,)):
            where = f"MCP tool {tool.name!r} of server {server.name}"
            if tool.name in seen:
                raise MCPConfigurationError(
                    f"agent {agent_name}: {where} has the same name as {seen[tool.name]} (use tool_prefix=)"
                )
            seen[tool.name] = where


def prepare_servers(
    agent_name: str, static: Sequence[Tool], servers: Sequence[MCPServer], pins: PinStore
) -> None:
    """In a worker, before a run's step: list each server's tools, reconcile them with the
    pins and keep what this process's lookups (`mcp_tools`) answer from. A server that cannot
    be reached keeps its pinned tools (their calls fail as unavailable). Raises
    MCPConfigurationError on a name collision."""
    names = [server.name for server in servers]
    duplicate = next((name for name in names if names.count(name) > 1), None)
    if duplicate is not None:
        raise MCPConfigurationError(f"agent {agent_name} declares two MCP servers named {duplicate!r}")
    runtime = _runtime()
    for server in servers:
        runtime.refresh(server, pins)
    check_names(agent_name, static, servers)


# --- The per-process event loop and the sessions it holds ------------------------------------


@dataclass
class _View:
    """What this process last learned of a server: the tools it gives (pinned definitions,
    refused where the served one differs), the store it reconciles with, whether it is down."""

    tools: tuple[Tool, ...]
    pins: PinStore
    down_since: float | None = None


class _Connection:
    """One session with one server, held by a task of the runtime's loop: the SDK's context
    managers must be entered and left by the same task."""

    def __init__(self, server: MCPServer) -> None:
        self.server = server
        self.session: ClientSession | None = None
        self.ready = asyncio.Event()
        self.stop = asyncio.Event()
        self.error: BaseException | None = None
        self.task: asyncio.Task[None] | None = None

    async def open(self) -> ClientSession:
        self.task = asyncio.get_running_loop().create_task(self._hold())
        await self.ready.wait()
        if self.session is None:
            raise ToolUnavailable(
                f"MCP server {self.server.name} could not be started: {_describe(self.error)}"
            )
        return self.session

    async def _hold(self) -> None:
        from mcp import ClientSession

        try:
            async with AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(_transport(self.server))
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                self.session = session
                self.ready.set()
                await self.stop.wait()
        except BaseException as exc:
            self.error = exc
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self.session = None
            self.ready.set()

    async def close(self) -> None:
        self.stop.set()
        if self.task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self.task), timeout=5)
            except (TimeoutError, asyncio.CancelledError):
                self.task.cancel()
            except Exception:
                logger.debug("closing MCP server %s", self.server.name, exc_info=True)


def _transport(server: MCPServer) -> Any:
    if isinstance(server, MCPServerStdio):
        from mcp import StdioServerParameters
        from mcp.client.stdio import get_default_environment, stdio_client

        declared = _resolved(server.env)
        environment = {"PATH": os.environ.get("PATH", os.defpath), **declared}
        # The SDK merges its own defaults (HOME, USER, SHELL, ...) under `env`; `env -u`
        # takes away those the declaration does not set, so the server gets exactly ours.
        unset = sorted(get_default_environment().keys() - environment.keys())
        command, args = server.command, list(server.args)
        if unset:
            env_binary = shutil.which("env", path=os.defpath) or "/usr/bin/env"
            prefix = [part for name in unset for part in ("-u", name)]
            command, args = env_binary, [*prefix, "--", server.command, *args]
        parameters = StdioServerParameters(command=command, args=args, env=environment)
        # The server's stderr goes to this process's own (fd 2): Celery replaces sys.stderr
        # with a logging proxy the SDK cannot hand to a child process.
        errlog = sys.__stderr__ if sys.__stderr__ is not None else open(os.devnull, "w")  # noqa: SIM115
        return stdio_client(parameters, errlog=errlog)
    from mcp.shared._httpx_utils import create_mcp_http_client

    client = create_mcp_http_client(headers=_resolved(server.headers))
    return _http_transport(server.url, client)


class _http_transport:  # noqa: N801 - an async context manager used like a function
    """streamable_http_client over a client carrying the declaration's headers, closing both."""

    def __init__(self, url: str, client: Any) -> None:
        self.url, self.client = url, client
        self.stack = AsyncExitStack()

    async def __aenter__(self) -> Any:
        from mcp.client.streamable_http import streamable_http_client

        await self.stack.enter_async_context(self.client)
        return await self.stack.enter_async_context(streamable_http_client(self.url, http_client=self.client))

    async def __aexit__(self, *exc: Any) -> None:
        await self.stack.aclose()


T = TypeVar("T")


class _Runtime:
    """The event-loop thread of one process and the sessions it holds."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="mcp-sessions")
        self.thread.start()
        self.connections: dict[int, _Connection] = {}
        self.views: dict[int, _View] = {}
        self.lock = threading.Lock()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float) -> T:
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result(timeout)
        except FutureTimeout:
            future.cancel()
            raise TimeoutError(f"no answer within {timeout:g}s") from None

    async def _session(self, server: MCPServer) -> ClientSession:
        connection = self.connections.get(server._connect_key())
        if connection is not None and connection.session is not None and not connection.stop.is_set():
            return connection.session
        connection = _Connection(server)
        self.connections[server._connect_key()] = connection
        return await asyncio.wait_for(connection.open(), timeout=CONNECT_TIMEOUT_SECONDS)

    async def _drop(self, server: MCPServer) -> None:
        connection = self.connections.pop(server._connect_key(), None)
        if connection is not None:
            await connection.close()

    async def _list(self, server: MCPServer) -> list[ToolDefinition]:
        """List the served tools; a session that fails is dropped and started once again
        (a stdio server that died is restarted here). Nothing is sent but `tools/list`."""
        for attempt in (1, 2):
            try:
                session = await self._session(server)
                listing = await asyncio.wait_for(_list_all(session), timeout=LIST_TIMEOUT_SECONDS)
                return definitions_of(server, listing)
            except Exception as exc:
                await self._drop(server)
                if attempt == 2:
                    if isinstance(exc, ToolUnavailable):
                        raise
                    raise ToolUnavailable(
                        f"MCP server {server.name} did not answer: {_describe(exc)}"
                    ) from exc
        raise AssertionError("unreachable")

    def served(self, server: MCPServer) -> list[ToolDefinition]:
        try:
            return self.run(self._list(server), CONNECT_TIMEOUT_SECONDS * 2 + LIST_TIMEOUT_SECONDS * 2)
        except TimeoutError as exc:
            raise ToolUnavailable(f"MCP server {server.name} did not answer: {exc}") from exc

    def refresh(self, server: MCPServer, pins: PinStore) -> None:
        """List, reconcile, keep the view. A server that is down keeps its pinned tools."""
        with self.lock:
            key = server._connect_key()
            view = self.views.get(key)
            if (
                view is not None
                and view.down_since is not None
                and time.monotonic() - view.down_since < RETRY_DOWN_AFTER_SECONDS
            ):
                return
            try:
                served = self.served(server)
            except ToolUnavailable as exc:
                logger.warning("MCP server %s is down: %s", server.name, exc)
                tools = tuple(_cached_tool(server, d, PinState.PINNED) for d in pins.pinned(server.name))
                self.views[key] = _View(tools=tools, pins=pins, down_since=time.monotonic())
                return
            self._reconciled(server, pins, served)

    def _reconciled(
        self, server: MCPServer, pins: PinStore, served: list[ToolDefinition]
    ) -> dict[str, PinState]:
        states = pins.reconcile(server.name, served)
        tools = tuple(
            _cached_tool(server, d, states.get(d.name, PinState.GONE)) for d in pins.pinned(server.name)
        )
        self.views[server._connect_key()] = _View(tools=tools, pins=pins)
        return states

    def call(
        self, server: MCPServer, definition: ToolDefinition, arguments: dict[str, Any], ctx: ToolContext
    ) -> Any:
        """Check the served definition against the pin this tool was built from, then send."""
        name = server.tool_name(definition.name)
        view = self.views.get(server._connect_key())
        if view is None:
            raise ToolUnavailable(f"MCP server {server.name} was not prepared in this process")
        served = self.served(server)  # ToolUnavailable: nothing was sent
        states = self._reconciled(server, view.pins, served)
        now_served = next((d for d in served if d.name == definition.name), None)
        if now_served is None:
            raise ToolError(refusal(name, PinState.GONE))
        if states.get(definition.name) not in RUNNABLE_STATES or now_served.digest != definition.digest:
            raise ToolError(refusal(name, PinState.CHANGED))
        meta = {IDEMPOTENCY_META_KEY: ctx.idempotency_key}
        try:
            result = self.run(
                self._call(server, definition.name, arguments, meta, ctx.timeout_seconds),
                ctx.timeout_seconds + 5,
            )
        except ToolUnavailable:
            raise
        except Exception as exc:
            # The request may have reached the server: never resend it blindly.
            self.run(self._drop(server), 10)
            raise MCPCallInterrupted(
                f"the call to MCP tool {name} may have reached server {server.name}: {_describe(exc)}"
            ) from exc
        return _result(name, result)

    async def _call(
        self, server: MCPServer, tool: str, arguments: dict[str, Any], meta: dict[str, Any], timeout: float
    ) -> Any:
        connection = self.connections.get(server._connect_key())
        if connection is None or connection.session is None:
            raise ToolUnavailable(f"MCP server {server.name} closed before the call was sent")
        return await connection.session.call_tool(
            tool, arguments, read_timeout_seconds=timeout, meta=cast("RequestParamsMeta", meta)
        )


async def _list_all(session: ClientSession) -> list[Any]:
    from mcp.types import PaginatedRequestParams

    listing = await session.list_tools()
    tools = list(listing.tools)
    while listing.next_cursor:
        listing = await session.list_tools(params=PaginatedRequestParams(cursor=listing.next_cursor))
        tools += listing.tools
    return tools


def _result(name: str, result: Any) -> Any:
    """What the model reads: the structured content if any, else the text; `isError` is a
    tool error (ToolError semantics: the call is done, the model hears why)."""
    texts = []
    for block in result.content or ():
        text = getattr(block, "text", None)
        texts.append(text if isinstance(text, str) else f"[{getattr(block, 'type', 'content')}]")
    text = "\n".join(texts)
    if result.is_error:
        raise ToolError(text or f"the MCP tool {name} reported an error")
    if result.structured_content is not None:
        return result.structured_content
    return text


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return "no reason given"
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _describe(exc.exceptions[0])
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


_RUNTIME: _Runtime | None = None
_RUNTIME_LOCK = threading.Lock()


def probe(server: MCPServer) -> str | None:
    """Whether this process can reach `server` now: None when it lists its tools, else why not
    (`manage.py agents`). It lists only: it pins nothing and sends no call."""
    try:
        _runtime().served(server)
    except ToolUnavailable as exc:
        return str(exc)
    return None


def close_all() -> None:
    """Close this process's sessions (a stdio server's stdin closes, then it is stopped) and
    forget what was learned of the servers. The next run that needs one starts it again."""
    runtime = _RUNTIME
    if runtime is None or runtime.pid != os.getpid():
        return
    with runtime.lock:
        for connection in list(runtime.connections.values()):
            runtime.run(connection.close(), 15)
        runtime.connections.clear()
        runtime.views.clear()


def _runtime() -> _Runtime:
    """This process's runtime, started on first use. A forked child (Celery's prefork) has
    none of its parent's threads: it starts its own, and never uses the parent's sessions."""
    global _RUNTIME
    with _RUNTIME_LOCK:
        if _RUNTIME is None or _RUNTIME.pid != os.getpid():
            _RUNTIME = _Runtime()
        return _RUNTIME
