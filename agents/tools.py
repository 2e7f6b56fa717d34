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

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from types import MappingProxyType
from typing import Any

import jsonschema
import referencing
import referencing.exceptions

from agents.routing import Quorum, Route
from agents.sandbox import SandboxConfig
from agents.second_opinion import model_spec_problem


class Effect(StrEnum):
    READ = "read"  # no change to the world
    DATABASE = "database"  # commits in the same transaction as the ledger row
    IDEMPOTENT_EXTERNAL = "idempotent_external"  # external, takes our idempotency key
    EXTERNAL = "external"  # external, no key: pending before, confirmed after


@dataclass(frozen=True)
class PastCall:
    """An earlier tool call of the same run, as an approval policy sees it (read-only).

    `outcome` is the result the model was shown ({"error": ...} for a failed, rejected or
    invalid call), or None for a call of the current batch that has not run yet.
    """

    name: str
    arguments: Mapping[str, Any]
    outcome: Any = None

    @classmethod
    def of(cls, name: str, arguments: Mapping[str, Any] | None, outcome: Any = None) -> PastCall:
        return cls(name=name, arguments=MappingProxyType(dict(arguments or {})), outcome=outcome)


CallHistory = Sequence[PastCall]
# A policy takes the call's arguments, optionally the run's earlier calls (oldest first), and
# optionally the world the tools act on (`ToolContext.world`), by a parameter named `world`:
# `def policy(arguments)`, `def policy(arguments, history)` or `def policy(arguments, history, world)`.
# One that reads the world is asked again by the gate inside the transaction that runs the
# effect, so it can lock what it read (docs/writing-an-agent.md, "A limit across runs").
ApprovalPolicy = Callable[..., bool]

# What a call will do, for the reviewer, before it is decided: a read-only function of the
# arguments and the context the call would run in (its world, working directory, time limit).
# It returns {"title": str, "rows": [[label, value], ...], "body": str | None,
# "warnings": [str, ...]} and must never perform the effect.
Preview = Callable[[Mapping[str, Any], "ToolContext"], dict[str, Any]]


def ALWAYS(arguments: Mapping[str, Any]) -> bool:  # noqa: N802 - reads as a constant
    return True


def NEVER(arguments: Mapping[str, Any]) -> bool:  # noqa: N802
    return False


DEFAULT_TIMEOUT_SECONDS = 30.0


class ToolError(Exception):
    """A failure the model should see as the call's result (bad order id, ...)."""


def schema_problem(schema: Any) -> str | None:
    """Why `schema` is not a valid JSON Schema (2020-12), or None when it is: a schema a
    framework sends for a call it gates (reviewdesk.runs.external), checked before it is kept."""
    if not isinstance(schema, Mapping):
        return "a JSON Schema is an object"
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        return f"not a valid JSON Schema at {'/'.join(str(p) for p in exc.path) or '(root)'}: {exc.message}"
    outside = _outside_refs(schema)
    if outside:
        return f"a $ref outside the schema itself ({outside[0]!r}): the desk resolves only '#...' references"
    return None


def schema_errors(schema: Mapping[str, Any], value: Any) -> list[str]:
    """`value`'s errors against a JSON Schema (2020-12) that `schema_problem` accepted, as a
    tool's `validation_errors` words them; empty when valid. References resolve within the
    schema only: an empty registry, so jsonschema never fetches a URL a framework named."""
    validator = jsonschema.Draft202012Validator(schema, registry=referencing.Registry())
    try:
        return _readable(validator.iter_errors(value))
    except referencing.exceptions.Unresolvable as exc:
        return [f"(root): the schema's reference {exc.ref!r} does not resolve"]


def _outside_refs(schema: Any) -> list[str]:
    """The `$ref` / `$dynamicRef` values anywhere in `schema` that point outside it."""
    found: list[str] = []
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            for key, item in node.items():
                if key in ("$ref", "$dynamicRef") and isinstance(item, str) and not item.startswith("#"):
                    found.append(item)
                else:
                    stack.append(item)
        elif isinstance(node, list):
            stack.extend(node)
    return found


def _readable(errors: Any) -> list[str]:
    ordered = sorted(errors, key=lambda e: list(e.path))
    return [f"{'/'.join(str(p) for p in error.path) or '(root)'}: {error.message}" for error in ordered]


def call_failed(result: Any) -> bool:
    """Whether a call's result says it failed: a ToolError's {"error": ...}, or a result that
    ran to its end and says so itself, {"outcome": "failed"} (a command that exited non-zero).
    The model reads the result either way, and may go on; the run records the call as failed."""
    return isinstance(result, Mapping) and ("error" in result or result.get("outcome") == "failed")


# --- Failure classes: what a tool raises says what the runtime may do next -----------
#
#   raise ToolError("no order X-1")      the model hears it as the call's result; the call is done
#   raise ToolUnavailable("503 ...")     transient: the effect certainly did NOT happen; the call
#                                        is retried with backoff under the retry budget
#   anything else                        for an EXTERNAL effect, the outcome is unknown: the ledger
#                                        row becomes `unknown` and a human reconciles it.
#                                        A DATABASE effect rolls back with its ledger row, so any
#                                        failure there is certainly undone: retried as transient.


class ToolUnavailable(Exception):
    """Transient: the service was unavailable and the effect certainly did not happen
    (connection refused, a 503 before the request body was accepted, a lock timeout).

    Raise it only when you know nothing reached the world: the runtime will run the
    call again. When in doubt (the request was sent, the reply never came), raise
    anything else and let a human reconcile it.
    """


class OnRetriesExhausted(StrEnum):
    """What happens to a call whose transient failures used up the retry budget."""

    FAIL = "fail"  # the run fails (error_kind "unavailable")
    ASK = "ask"  # a reviewer is asked, through a reconciliation item, whether to try again


@dataclass(frozen=True)
class ToolContext:
    run_id: str
    tool_call_id: str
    idempotency_key: str
    workdir: Path
    # Host-provided services a tool may need: an instance of the class its agent module names
    # in TOOL_WORLD (agents.registry), or of the host's choice (the desk's DESK_TOOL_WORLD).
    world: Any = None
    # How long the tool may wait on one blocking step (a process, a request) before giving up.
    # The desk fills it from DESK_EXECUTE_TIMEOUT_SECONDS; the default is that setting's.
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    # How a tool that starts processes isolates them (agents.sandbox); the desk fills it from DESK_SANDBOX*.
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)


@dataclass(frozen=True)
class ToolSource:
    """Where a tool comes from, as `manage.py agents` and the API show it.

    A tool without one comes from its function's module (`agents.catalog.tool_source`). A tool
    served by an MCP server carries the server's name, the digest of the pinned definition the
    desk accepted, and what the desk last saw of the server.
    """

    kind: str  # "module" | "mcp"
    name: str  # the module's dotted path, or the MCP server's name
    pin: str | None = None  # MCP: the pinned definition's digest
    state: str | None = None  # MCP: "up", "down", "pin changed", ...


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    effect: Effect
    func: Callable[[dict[str, Any], ToolContext], Any]
    approval: ApprovalPolicy = NEVER
    on_retries_exhausted: OnRetriesExhausted = OnRetriesExhausted.FAIL
    preview: Preview | None = None  # see `Preview`; None: the desk shows the arguments only
    # Only a decision signed by the reviewer's own device key runs it (agents.trust).
    requires_device_keys: bool = False
    # Time and escalation: a reviewer is reminded at half the target and, past it, the item
    # escalates to the next entry of `escalation` (a username or "group:NAME"). None: the agent's.
    response_target_seconds: int | None = None
    escalation: tuple[str, ...] = ()
    # Who must decide (agents.routing): the first route that applies names them.
    routing: tuple[Route, ...] = ()
    # How many different reviewers must approve; the gate counts their signed decisions.
    quorum: Quorum = field(default_factory=Quorum)
    # False: no standing grant may ever allow it (irreversible or quorum tools); every call asks.
    grantable: bool = True
    # Where it comes from; None: its function's module (see ToolSource).
    source: ToolSource | None = None
    # Whether what the tool returns is the desk's own truth (a lookup in your own database) or
    # text someone else wrote (a web page, an inbound email). None: `trusts_output` decides.
    # The desk marks an argument that came only from untrusted output (agents.provenance).
    output_trusted: bool | None = None
    # JSON Pointers of the arguments that say where the effect lands: an email's recipient, a
    # refund's order and amount, a command. None: every argument. Provenance warns when one of
    # these came only from untrusted output.
    aimed: tuple[str, ...] | None = None
    # A model's advisory reading of each call (agents.second_opinion): a model spec like a run's.
    # None: the agent's; False: none for this tool, whatever the agent says. It never decides.
    second_opinion: dict[str, Any] | bool | None = None
    _validator: Any = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        try:
            effect = Effect(self.effect)  # also accepts the plain string
        except ValueError:
            kinds = ", ".join(kind.value for kind in Effect)
            raise ValueError(
                f"tool {self.name!r}: unknown effect kind {self.effect!r} (one of {kinds})"
            ) from None
        object.__setattr__(self, "effect", effect)
        try:
            jsonschema.Draft202012Validator.check_schema(self.parameters)
        except jsonschema.SchemaError as exc:
            where = "/".join(str(p) for p in exc.path) or "(root)"
            raise ValueError(
                f"tool {self.name!r}: its parameters are not a valid JSON Schema at {where}: {exc.message}"
            ) from None
        object.__setattr__(self, "_validator", jsonschema.Draft202012Validator(self.parameters))
        if self.second_opinion is not None and self.second_opinion is not False:
            problem = model_spec_problem(self.second_opinion)
            if problem:
                raise ValueError(f"tool {self.name!r}: second_opinion: {problem}")

    @property
    def trusts_output(self) -> bool:
        """Whether the tool's output counts as trusted: as declared, else only a read of your
        own systems (a READ tool of a module; an MCP server's tools are someone else's)."""
        if self.output_trusted is not None:
            return self.output_trusted
        return self.effect == Effect.READ and (self.source is None or self.source.kind == "module")

    @property
    def accepts_grants(self) -> bool:
        """Whether a standing grant may allow a call: one reviewer's grant never stands in
        for a quorum of several, whatever `grantable` says."""
        return self.grantable and self.quorum.approvals == 1

    def needs_approval(
        self, arguments: Mapping[str, Any], history: CallHistory = (), world: Any = None
    ) -> bool:
        """Ask the policy; one that takes a second parameter also gets the run's earlier calls,
        and one with a parameter named `world` gets the world (None where none is at hand)."""
        if _takes_world(self.approval):
            return bool(self.approval(arguments, tuple(history), world=world))
        if _takes_history(self.approval):
            return bool(self.approval(arguments, tuple(history)))
        return bool(self.approval(arguments))

    def validation_errors(self, arguments: Any) -> list[str]:
        """Schema errors for `arguments`, as readable strings; empty when valid."""
        return _readable(self._validator.iter_errors(arguments))

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


def _takes_world(policy: ApprovalPolicy) -> bool:
    try:
        return "world" in inspect.signature(policy).parameters
    except (TypeError, ValueError):
        return False


def _takes_history(policy: ApprovalPolicy) -> bool:
    try:
        parameters = inspect.signature(policy).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: the one-argument form
        return False
    positional = [
        p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
    ]
    return len(positional) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in positional)
