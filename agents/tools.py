"""Declaring a tool: its JSON Schema, the kind of effect it has, its approval policy.

    send_email = Tool(
        name="send_email",
        description="Send an email.",
        parameters={"type": "object", "properties": {...}, "required": [...]},
        effect=Effect.EXTERNAL,
        approval=ALWAYS,
        func=send_email_impl,   # (arguments: dict, ctx: ToolContext) -> JSON value
    )

The effect kind tells the approval gate how to record the call in the ledger
(DESIGN.md, "Side-effect ledger").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import jsonschema


class Effect(StrEnum):
    READ = "read"  # no change to the world
    DATABASE = "database"  # commits in the same transaction as the ledger row
    IDEMPOTENT_EXTERNAL = "idempotent_external"  # external, takes our idempotency key
    EXTERNAL = "external"  # external, no key: pending before, confirmed after


ApprovalPolicy = Callable[[Mapping[str, Any]], bool]


def ALWAYS(arguments: Mapping[str, Any]) -> bool:  # noqa: N802 - reads as a constant
    return True


def NEVER(arguments: Mapping[str, Any]) -> bool:  # noqa: N802
    return False


class ToolError(Exception):
    """A failure the model should see as the call's result (bad order id, ...)."""


@dataclass(frozen=True)
class ToolContext:
    run_id: str
    tool_call_id: str
    idempotency_key: str
    workdir: Path
    # Host-provided services a tool may need (for the demo: `DemoWorld`).
    world: Any = None


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    effect: Effect
    func: Callable[[dict[str, Any], ToolContext], Any]
    approval: ApprovalPolicy = NEVER
    _validator: Any = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        jsonschema.Draft202012Validator.check_schema(self.parameters)
        object.__setattr__(self, "_validator", jsonschema.Draft202012Validator(self.parameters))

    def needs_approval(self, arguments: Mapping[str, Any]) -> bool:
        return bool(self.approval(arguments))

    def validation_errors(self, arguments: Any) -> list[str]:
        """Schema errors for `arguments`, as readable strings; empty when valid."""
        errors = sorted(self._validator.iter_errors(arguments), key=lambda e: list(e.path))
        return [f"{'/'.join(str(p) for p in error.path) or '(root)'}: {error.message}" for error in errors]

    def run(self, arguments: dict[str, Any], ctx: ToolContext) -> Any:
        return self.func(arguments, ctx)

    def spec(self) -> dict[str, Any]:
        """The tool as an OpenAI Chat Completions function declaration."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }
