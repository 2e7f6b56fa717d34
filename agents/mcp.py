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
"""

from __future__ import annotations

import asyncio
import fnmatch
import logging
import os
import re
import shutil
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import AsyncExitStack
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

import jsonschema

from agents.canonical import sha256_hex
from agents.tools import (
    ALWAYS,
    NEVER,
    ApprovalPolicy,
    Effect,
    Tool,
    ToolContext,
    ToolError,
    ToolSource,
    ToolUnavailable,
)

if TYPE_CHECKING:
    from mcp import ClientSession
    from mcp_types import RequestParamsMeta

__all__ = [
    "ALWAYS",
    "NEVER",
    "InMemoryPinStore",
    "MCPCallInterrupted",
    "MCPConfigurationError",
    "MCPServerHTTP",
    "MCPServerStdio",
    "PinState",
    "PinStore",
    "ToolDefinition",
    "env",
    "mcp_tools",
    "prepare_servers",
    "use_pin_store",
]

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


class MCPConfigurationError(Exception):
    """A declaration the desk cannot serve: two tools under one name, a bad pattern."""


class MCPCallInterrupted(Exception):
    """The `tools/call` may have reached the server before the connection failed or the
    time ran out: its outcome is unknown (an `external` tool's ledger row becomes `unknown`)."""


# --- Pinned definitions: the seam with the desk's pin store (reviewdesk/mcp/) -------------


# The annotations a pin covers: what `trust_annotations=True` reads to set a tool's effect kind,
# and what a reviewer may read as the tool's own claim (the title is left out: display only).
PINNED_HINTS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")

# The tool names the desk pins (the MCP specification's recommended names): any other is
# refused, never pinned, as an admin's page and URLs could not name it safely.
TOOL_NAME_PATTERN = re.compile(r"[A-Za-z0-9_.-]{1,128}")


def tool_name_acceptable(name: str) -> bool:
    return TOOL_NAME_PATTERN.fullmatch(name) is not None


@dataclass(frozen=True)
class ToolDefinition:
    """A tool as a server serves it. `digest` covers what the model and the reviewer are
    shown, what an edit is checked against and what may decide how a call runs: the name,
    description, input schema and the annotations' four hints (`PINNED_HINTS`; with
    `trust_annotations=True` they set the tool's effect kind)."""

    server: str
    name: str
    description: str
    input_schema: dict[str, Any]
    annotations: dict[str, Any] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        """SHA-256 (hex) of the RFC 8785 canonical JSON of {name, description, inputSchema,
        annotations}, the annotations cut to the hints of `PINNED_HINTS` the server sent."""
        return sha256_hex(
            {
                "name": self.name,
                "description": self.description,
                "inputSchema": self.input_schema,
                "annotations": self.pinned_hints,
            }
        )

    @property
    def pinned_hints(self) -> dict[str, Any]:
        """The annotations' hints the pin covers, as served (a hint not sent is left out)."""
        return {hint: self.annotations[hint] for hint in PINNED_HINTS if hint in self.annotations}

    def to_dict(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema,
            "annotations": self.annotations,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolDefinition:
        return cls(
            server=str(data["server"]),
            name=str(data["name"]),
            description=str(data.get("description") or ""),
            input_schema=dict(data.get("inputSchema") or {}),
            annotations=dict(data.get("annotations") or {}),
        )


class PinState(StrEnum):
    PINNED = "pinned"  # served as pinned
    NEW = "new"  # first sight: now recorded and pinned
    CHANGED = "changed"  # served differently from its pin: refused until an admin accepts
    GONE = "gone"  # pinned but no longer served: refused


RUNNABLE_STATES = frozenset({PinState.PINNED, PinState.NEW})


class PinStore(Protocol):
    def reconcile(self, server: str, served: Sequence[ToolDefinition]) -> dict[str, PinState]:
        """Compare what `server` serves now with its pins; pin first-seen definitions. For a
        CHANGED or GONE tool, record the served definition (or its absence) as awaiting an
        admin and raise the admin notice once. Returns the state of every pinned or served tool."""
        ...

    def pinned(self, server: str) -> list[ToolDefinition]:
        """The accepted definitions of `server`'s tools."""
        ...


class InMemoryPinStore:
    """A `PinStore` in memory, for the runtime's tests and the in-memory host. `accept` does
    what `manage.py mcp_tools --accept SERVER` does on the desk."""

    def __init__(self) -> None:
        self.pins: dict[str, dict[str, ToolDefinition]] = {}
        self.awaiting: dict[str, dict[str, ToolDefinition | None]] = {}
        self.notices: list[tuple[str, str, PinState]] = []

    def reconcile(self, server: str, served: Sequence[ToolDefinition]) -> dict[str, PinState]:
        first_sight = server not in self.pins  # only a server's first sight is trusted
        pins = self.pins.setdefault(server, {})
        awaiting = self.awaiting.setdefault(server, {})
        served_by_name = {d.name: d for d in served}
        states: dict[str, PinState] = {}
        for name, definition in served_by_name.items():
            pin = pins.get(name)
            if pin is None and first_sight and tool_name_acceptable(name):
                pins[name] = definition
                states[name] = PinState.NEW
            elif pin is None:  # added to a server already seen, or a name refused: an admin's
                states[name] = self._await(server, name, definition, PinState.CHANGED)
            elif pin.digest == definition.digest:
                states[name] = PinState.PINNED
                awaiting.pop(name, None)
            else:
                states[name] = self._await(server, name, definition, PinState.CHANGED)
        for name in pins.keys() - served_by_name.keys():
            states[name] = self._await(server, name, None, PinState.GONE)
        return states

    def _await(self, server: str, name: str, served: ToolDefinition | None, state: PinState) -> PinState:
        awaiting = self.awaiting[server]
        if name not in awaiting or awaiting[name] != served:
            awaiting[name] = served
            self.notices.append((server, name, state))  # once per new served definition
        return state

    def pinned(self, server: str) -> list[ToolDefinition]:
        return list(self.pins.get(server, {}).values())

    def accept(self, server: str) -> None:
        pins = self.pins.setdefault(server, {})
        for name, served in self.awaiting.pop(server, {}).items():
            if served is None:
                pins.pop(name, None)
            elif tool_name_acceptable(name):
                pins[name] = served


# --- Secrets from the environment, resolved when the worker connects -----------------------


@dataclass(frozen=True)
class env:  # noqa: N801 - reads as a function: headers={"Authorization": env("FS_TOKEN")}
    """A value read from the worker's environment when it connects, so no secret sits in code.
    `template` may wrap it: env("FS_TOKEN", "Bearer {}")."""

    name: str
    template: str = "{}"

    def resolve(self) -> str:
        try:
            value = os.environ[self.name]
        except KeyError:
            raise ToolUnavailable(f"the environment variable {self.name} is not set") from None
        return self.template.format(value)


Secret = str | env


def _resolved(values: Mapping[str, Secret] | None) -> dict[str, str]:
    return {
        key: value.resolve() if isinstance(value, env) else str(value)
        for key, value in (values or {}).items()
    }


# --- Declaring a server ---------------------------------------------------------------------


class _ServerDeclaration:
    """What stdio and HTTP declarations share: the name, the approval patterns, the effect
    mapping and the prefix. Declarations compare by identity: each is one server of one module."""

    name: str
    approval: Mapping[str, ApprovalPolicy] | None
    trust_annotations: bool
    tool_prefix: str | None

    def _check(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise MCPConfigurationError("an MCP server needs a name")
        for pattern, policy in (self.approval or {}).items():
            if not isinstance(pattern, str) or not callable(policy):
                raise MCPConfigurationError(
                    f"MCP server {self.name}: approval maps fnmatch patterns to policies (ALWAYS, NEVER "
                    f"or a function of the arguments); got {pattern!r}: {policy!r}"
                )

    def tool_name(self, served_name: str) -> str:
        """The agent's name for a served tool: the server's own, after `tool_prefix`."""
        return f"{self.tool_prefix or ''}{served_name}"

    def policy_for(self, served_name: str) -> ApprovalPolicy:
        """The first `approval` pattern matching the served name (not the prefixed one) gives
        the policy; none matching, or no `approval`: every call needs a human."""
        for pattern, policy in (self.approval or {}).items():
            if fnmatch.fnmatchcase(served_name, pattern):
                return policy
        return ALWAYS

    def effect_for(self, definition: ToolDefinition) -> Effect:
        """`external` unless the declaration trusts the server's annotations (docs/mcp.md)."""
        if not self.trust_annotations:
            return Effect.EXTERNAL
        hints = definition.annotations
        if hints.get("readOnlyHint") is True:
            return Effect.READ
        if hints.get("idempotentHint") is True:
            return Effect.IDEMPOTENT_EXTERNAL
        return Effect.EXTERNAL

    def _connect_key(self) -> int:
        return id(self)


@dataclass(frozen=True, eq=False)
class MCPServerStdio(_ServerDeclaration):
    """A server the worker starts as a process and talks to over stdin/stdout. Its
    environment is exactly `env` plus PATH (the worker's, unless `env` sets one): nothing else
    of the worker's environment reaches it. A value may be `env("NAME")`, read at start."""

    name: str
    command: str
    args: Sequence[str] = ()
    env: Mapping[str, Secret] | None = None
    approval: Mapping[str, ApprovalPolicy] | None = None
    trust_annotations: bool = False
    tool_prefix: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "args", tuple(self.args))
        self._check()


@dataclass(frozen=True, eq=False)
class MCPServerHTTP(_ServerDeclaration):
    """A server reached over streamable HTTP at `url`. A header value may be `env("NAME")`
    (or `env("NAME", "Bearer {}")`), read from the worker's environment when it connects."""

    name: str
    url: str
    headers: Mapping[str, Secret] | None = None
    approval: Mapping[str, ApprovalPolicy] | None = None
    trust_annotations: bool = False
    tool_prefix: str | None = None

    def __post_init__(self) -> None:
        self._check()


MCPServer = MCPServerStdio | MCPServerHTTP


def definitions_of(server: MCPServer, tools: Sequence[Any]) -> list[ToolDefinition]:
    """The SDK's `mcp.types.Tool`s as definitions (annotations in their wire names)."""
    definitions = []
    for tool in tools:
        annotations = (
            tool.annotations.model_dump(by_alias=True, exclude_none=True) if tool.annotations else {}
        )
        definitions.append(
            ToolDefinition(
                server=server.name,
                name=tool.name,
                description=tool.description or "",
                input_schema=dict(tool.input_schema or {}),
                annotations=annotations,
            )
        )
    return definitions


# --- The tools an agent gets from its servers ------------------------------------------------


def refusal(tool_name: str, state: PinState) -> str:
    if state == PinState.GONE:
        return (
            f"the MCP tool {tool_name} is no longer served by its server since it was pinned; "
            "an admin must accept the change"
        )
    return f"the MCP tool {tool_name}'s definition changed since it was pinned; an admin must accept it"


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
