"""The definition a run was started with: a fingerprint of an agent, and what a change means
for a call that waited through it.

A run records, when it is submitted, the SHA-256 of its agent's description (`describe`:
every tool's name, description, parameters schema, effect kind, approval policy by qualified
name, routing, quorum, grantable, device keys..., and the agent's own settings that govern
its calls), over RFC 8785 canonical JSON, and a digest of each part (`digests`), small enough
to keep on the run and enough to say in words what changed (`changes`).

When a worker resumes the run with a definition whose fingerprint differs, each call about
to run is checked again against the worker's definition before the gate sees it
(`recheck_call`, and the host's routing check, `DefinitionHost.routed_elsewhere`):

    the tool is gone                  the call fails with an error the model reads
    the check fails                   the call goes back to a human, with the reason
    it holds                          the call runs; once the batch has settled the run records
                                      the new definition and its timeline says what changed

Whatever the fingerprints say, the arguments a call is about to run with are checked against
the worker's schema of its tool (`arguments_misfit`, asked by the loop): a recorded fingerprint
that agrees with the worker's (an edit checked by a web process on another release, or one a
database writer rewrote) does not let a call that no schema now in force allows run.

The runtime knows no users or groups: whether the reviewers who decided a call are still among
those the routing now names is the host's to say.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from agents.canonical import sha256_hex
from agents.decisions import APPROVING_VERDICTS, RERUN_VERDICTS, SignedDecision, is_device_signed
from agents.routing import Route

if TYPE_CHECKING:
    from agents.registry import Agent
    from agents.state import CallState
    from agents.tools import Tool

# The agent's own settings that govern its calls, and each tool's; (name in the description,
# attribute). The order is the order `changes` names them in.
_AGENT_PARTS = (
    "requires_device_keys",
    "routing",
    "approval_ttl_seconds",
    "on_approval_expired",
    "response_target_seconds",
    "escalation",
)
_TOOL_PARTS = (
    "description",
    "parameters",
    "effect",
    "approval",
    "routing",
    "quorum",
    "grantable",
    "requires_device_keys",
    "on_retries_exhausted",
    "preview",
    "response_target_seconds",
    "escalation",
    "kind",
)
# The parts of a tool (and of the agent) that say who must decide its calls, and how many.
_DECIDERS_PARTS = ("routing", "quorum")
_DIGEST_LENGTH = 16  # hex characters of each part's digest: to tell a change, not to sign one


def qualified_name(value: Any) -> str | None:
    """A policy's (or preview's) module and qualified name: what the fingerprint records of a
    function, whose code it cannot hash. None for None."""
    if value is None:
        return None
    module = getattr(value, "__module__", None) or type(value).__module__
    name = getattr(value, "__qualname__", None) or type(value).__qualname__
    return f"{module}.{name}"


def _json(value: Any) -> Any:
    """A JSON value for a route's condition value (a tuple, a set, anything else by repr)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Mapping):
        return {str(k): _json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json(v) for v in value]
    if isinstance(value, set | frozenset):
        return sorted((_json(v) for v in value), key=repr)
    return repr(value)


def _routes(routes: tuple[Route, ...]) -> list[dict[str, Any]]:
    return [
        {"to": list(route.to), "when": [[c.field, c.op, _json(c.value)] for c in route.when]}
        for route in routes
    ]


def describe_tool(tool: Tool) -> dict[str, Any]:
    """A tool as the fingerprint sees it: all that decides how its calls are checked and run."""
    return {
        "description": tool.description,
        "parameters": _json(tool.parameters),
        "effect": str(tool.effect),
        "approval": qualified_name(tool.approval),
        "routing": _routes(tool.routing),
        "quorum": {"approvals": tool.quorum.approvals, "groups": list(tool.quorum.groups)},
        "grantable": tool.grantable,
        "requires_device_keys": tool.requires_device_keys,
        "on_retries_exhausted": str(tool.on_retries_exhausted),
        "preview": qualified_name(tool.preview),
        "response_target_seconds": tool.response_target_seconds,
        "escalation": list(tool.escalation),
        "kind": qualified_name(type(tool)),  # a question is a Tool of its own class
    }


def describe(agent: Agent) -> dict[str, Any]:
    """The agent's canonical description (JSON): its settings and its tools by name."""
    return {
        "agent": agent.name,
        "settings": {
            "requires_device_keys": agent.requires_device_keys,
            "routing": _routes(agent.routing),
            "approval_ttl_seconds": agent.approval_ttl_seconds,
            "on_approval_expired": str(agent.on_approval_expired),
            "response_target_seconds": agent.response_target_seconds,
            "escalation": list(agent.escalation),
        },
        # MCP servers' tools too, as this process knows them (their pinned definitions).
        "tools": {tool.name: describe_tool(tool) for tool in agent.all_tools()},
    }


def fingerprint(agent: Agent) -> str:
    """SHA-256 (hex) of the RFC 8785 canonical JSON of `describe(agent)`."""
    return sha256_hex(describe(agent))


def digests(agent: Agent) -> dict[str, Any]:
    """Each part of the description by a short digest: what a run keeps besides the
    fingerprint, so that `changes` can name what differs without keeping every schema."""
    description = describe(agent)

    def short(value: Any) -> str:
        return sha256_hex(value)[:_DIGEST_LENGTH]

    return {
        "settings": {part: short(description["settings"][part]) for part in _AGENT_PARTS},
        "tools": {
            name: {part: short(tool[part]) for part in _TOOL_PARTS}
            for name, tool in description["tools"].items()
        },
    }


_TOOL_WORDS = {
    "parameters": "the schema of {tool} changed",
    "description": "the description of {tool} changed",
    "effect": "the effect kind of {tool} changed",
    "approval": "the approval policy of {tool} changed",
    "routing": "the routing of {tool} changed",
    "quorum": "the quorum of {tool} changed",
    "grantable": "whether a standing grant may allow {tool} changed",
    "requires_device_keys": "whether {tool} requires device-signed decisions changed",
    "kind": "what kind of tool {tool} is changed",
}


def tool_changes(old: Mapping[str, Any] | None, new: Mapping[str, Any], tool: str) -> list[str]:
    """What changed of one tool between two `digests`, in words ("the schema of refund_payment
    changed", "execute no longer exists"); empty when nothing did. `old` None: unknown."""
    if old is None:
        return [f"the definition {tool} had when this run started was not recorded"]
    before, after = old.get("tools", {}).get(tool), new.get("tools", {}).get(tool)
    if before is None and after is None:
        return []
    if after is None:
        return [f"{tool} no longer exists"]
    if before is None:
        return [f"{tool} was added"]
    return [
        _TOOL_WORDS.get(part, "the {part} of {tool} changed").format(tool=tool, part=part.replace("_", " "))
        for part in _TOOL_PARTS
        if before.get(part) != after.get(part)
    ]


def changes(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> list[str]:
    """Everything that changed between two `digests`, in words, the agent's settings first."""
    if old is None:
        return ["this run started before definitions were recorded"]
    words = [
        f"the agent's {part.replace('_', ' ')} changed"
        for part in _AGENT_PARTS
        if old.get("settings", {}).get(part) != new.get("settings", {}).get(part)
    ]
    names = list(old.get("tools", {})) + [n for n in new.get("tools", {}) if n not in old.get("tools", {})]
    for name in names:
        words += tool_changes(old, new, name)
    return words


def deciders_changed(old: Mapping[str, Any] | None, new: Mapping[str, Any], tool: str) -> bool:
    """Whether who must decide `tool`'s calls may differ: its routing or quorum, or the
    agent's routing, changed (or what they were is unknown)."""
    if old is None:
        return True
    before, after = old.get("tools", {}).get(tool) or {}, new.get("tools", {}).get(tool) or {}
    return old.get("settings", {}).get("routing") != new.get("settings", {}).get("routing") or any(
        before.get(part) != after.get(part) for part in _DECIDERS_PARTS
    )


# What an MCP server says of its tool: a change of any is what a "rug pull" changes.
_SERVED_PARTS = ("description", "parameters", "effect")


def served_parts(digests: Mapping[str, Any], tool: str) -> str:
    """One tool's `_SERVED_PARTS` of `digests`, as one string ("" for a tool it lacks)."""
    parts = digests.get("tools", {}).get(tool) or {}
    return ":".join(str(parts.get(part, "")) for part in _SERVED_PARTS) if parts else ""


def served_elsewhere(tool: Tool | None) -> bool:
    """Whether the tool's definition is served by someone else's server (an MCP tool), so that a
    change of it is not this deployment's own code changing."""
    return tool is not None and tool.source is not None and tool.source.kind == "mcp"


@dataclass(frozen=True)
class Recorded:
    """The definition a run records: its fingerprint and digests; "" and None when the run
    started before definitions were recorded (unknown: every call is checked)."""

    sha256: str
    digests: Mapping[str, Any] | None


@dataclass(frozen=True)
class Drift:
    """The run's recorded definition differs from the worker's (`drift`)."""

    recorded: Recorded
    sha256: str  # the worker's
    digests: dict[str, Any]  # the worker's

    @property
    def old(self) -> Mapping[str, Any] | None:
        return self.recorded.digests if self.recorded.sha256 else None

    def changes(self) -> list[str]:
        return changes(self.old, self.digests)

    def deciders_changed(self, tool: str) -> bool:
        return deciders_changed(self.old, self.digests, tool)

    def served_parts(self, tool: str) -> str:
        """What `tool` says it does now (its description, schema and effect kind), digested."""
        return served_parts(self.digests, tool)

    def served_definition_changed(self, tool: str, asked_under: str | None) -> bool:
        """Whether what `tool` says it does changed since the call's decision was asked for:
        since `asked_under` when the call was asked again for this reason, else since the run
        started (or what it said then is unknown)."""
        if asked_under is not None:
            return asked_under != self.served_parts(tool)
        return self.old is None or served_parts(self.old, tool) != self.served_parts(tool)


@runtime_checkable
class DefinitionHost(Protocol):
    """What a host that records the run's definition adds to `agents.loop.Host`. A host
    without these methods records none, and the loop checks nothing again."""

    def recorded_definition(self) -> Recorded: ...

    def definition_adopted(self, *, sha256: str, digests: dict[str, Any], changes: list[str]) -> None:
        """Record the worker's definition on the run (the one it goes on under) and say on its
        timeline what changed."""
        ...

    def call_sent_back(self, call: CallState, reason: str) -> None:
        """The call goes back to a human: its next request carries `reason`."""
        ...

    def call_gone(self, call: CallState, reason: str) -> None:
        """The call's tool no longer exists: the call failed with `reason` (timeline, audit)."""
        ...

    def routed_elsewhere(self, call: CallState, decision: SignedDecision) -> str | None:
        """Why the reviewers who decided this call would not be those the routing (and the
        quorum's groups) now in force name for it; None when they would."""
        ...


def drift(agent: Agent, host: Any) -> Drift | None:
    """The drift between the run's recorded definition and `agent`, or None when there is none
    (or the host records no definition)."""
    if not isinstance(host, DefinitionHost):
        return None
    recorded = host.recorded_definition()
    sha256 = fingerprint(agent)
    if recorded.sha256 == sha256:
        return None
    return Drift(recorded=recorded, sha256=sha256, digests=digests(agent))


def arguments_misfit(tool: Tool, call: CallState, decision: SignedDecision | None) -> str | None:
    """How the arguments the call would run with (its decision's: an edit's own; else the
    model's) fail `tool`'s schema, in words (the first three errors); None when they fit.

    Checked before every call runs, whether or not the run's recorded definition differs from
    the worker's: an edit checked by a web process on another release (a rolling deploy), or a
    recorded fingerprint a database writer rewrote, hides a drift that this check still sees."""
    arguments = decision.arguments if decision is not None else call.arguments
    errors = tool.validation_errors(arguments)
    return "; ".join(errors[:3]) if errors else None


@dataclass(frozen=True)
class Recheck:
    """A call checked again against the worker's definition: `reason` None when it holds;
    `gone` when its tool no longer exists (the call fails, nobody is asked)."""

    reason: str | None = None
    gone: bool = False


HOLDS = Recheck()


def recheck_call(
    agent: Agent,
    call: CallState,
    decision: SignedDecision | None,
    *,
    device_required: Callable[[str], bool] = lambda tool: False,
) -> Recheck:
    """Check a call about to run against the definition now in force: its tool exists, the
    arguments it would run with fit the tool's schema, and its decision (if any) gives what
    the tool now requires: a device signature, and a quorum's count of distinct reviewers.
    Routing is the host's (`DefinitionHost.routed_elsewhere`); a policy needs no check here:
    a decided call had a human, and one without is asked its policy again by the gate."""
    tool = agent.tool(call.name)
    if tool is None:
        return Recheck(f"{call.name} no longer exists in this agent's definition", gone=True)
    misfit = arguments_misfit(tool, call, decision)
    if misfit:
        return Recheck(f"the arguments no longer fit the schema of {call.name}: {misfit}")
    if decision is None:
        return HOLDS
    if device_required(call.name) and not is_device_signed(decision.payload):
        return Recheck(f"{call.name} now requires a decision signed by the reviewer's device key")
    if decision.verdict in (*APPROVING_VERDICTS, *RERUN_VERDICTS):
        reviewers = {str(vote.payload.get("reviewer")) for vote in (decision, *decision.co_decisions)}
        if len(reviewers) < tool.quorum.approvals:
            return Recheck(
                f"{call.name} now needs approvals from {tool.quorum.approvals} different reviewers; "
                f"this call has {len(reviewers)}"
            )
    return HOLDS
