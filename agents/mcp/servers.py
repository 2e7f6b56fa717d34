"""Declaring an MCP server: `MCPServerStdio` and `MCPServerHTTP`, their approval patterns,
effect mapping and tool prefix, and `env(...)` for secrets read when the worker connects."""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agents.mcp.pins import ToolDefinition
from agents.tools import ALWAYS, ApprovalPolicy, Effect, ToolUnavailable


class MCPConfigurationError(Exception):
    """A declaration the desk cannot serve: two tools under one name, a bad pattern."""


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
