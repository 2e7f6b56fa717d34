"""The checkpoint snapshot: where the turn loop stands, and each pending call's state.

Messages are not in the snapshot: they live in the run's append-only log and
the snapshot records how many of them it covers (`message_count`).

Since v6 the open batch is not copied either: its calls are the tool calls of the
assistant message at position `message_count - 1` (the last one the snapshot covers),
and each call's entry holds its id (checked against that message's) and what the log
does not hold: its status, result, checkpoint and grant, and its name or arguments only
where they differ from the message's. A state loaded from such a snapshot answers about
ids and statuses at once; its calls' names and arguments arrive with `resolve_batch`,
which reads that message and refuses one that is not the batch's.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from enum import StrEnum
from typing import Any

SCHEMA_VERSION = 6


class SnapshotError(ValueError):
    pass


class Step(StrEnum):
    MODEL = "model"  # next: call the model
    TOOLS = "tools"  # next: settle the open batch of tool calls
    DONE = "done"


class CallStatus(StrEnum):
    READY = "ready"  # valid, needs no approval: runs at once
    AWAITING = "awaiting_approval"
    DONE = "done"
    REJECTED = "rejected"
    INVALID = "invalid"  # unknown tool or bad arguments: the model sees the error
    # v3: a worker died between the ledger's pending and confirmed; a human must say
    # whether the effect happened (reconcile) before the batch can complete.
    UNKNOWN = "unknown_effect"


@dataclass
class CallState:
    id: str
    name: str
    arguments: dict[str, Any] | None
    status: CallStatus
    result: Any = None
    # The checkpoint at which this call's approval was raised (decisions bind it).
    checkpoint_id: str | None = None
    # v4: a standing grant found to allow this call without asking (the gate verifies and uses it).
    grant_id: str | None = None
    # What the call's MCP tool said of itself (agents.definition.served_parts) when the call was
    # asked again because that changed: a decision given since consents to that definition.
    asked_under: str | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CallState:
        # v6: an entry without its name or arguments takes them from the log (resolve_batch).
        return cls(**{"name": "", "arguments": None, **data, "status": CallStatus(data["status"])})

    def to_dict(self, logged: LoggedCall | None = None) -> dict[str, Any]:
        """The call's entry; with `logged` (this call as the log holds it), less what it holds."""
        data = _without_defaults(self, asdict(self))
        if logged is not None and logged.id == self.id:
            if logged.name == self.name:
                del data["name"]
            if _same_json(logged.arguments, self.arguments):
                del data["arguments"]
        return data


@dataclass(frozen=True)
class LoggedCall:
    """A tool call as the log's assistant message holds it, read as `prepare_call` reads it."""

    id: str
    name: str
    arguments: dict[str, Any] | None  # None when the text is not a JSON object


def logged_calls(message: dict[str, Any] | None) -> list[LoggedCall] | None:
    """The tool calls of an assistant message, or None when it is not one that has them."""
    if not isinstance(message, dict) or message.get("role") != "assistant":
        return None
    calls = message.get("tool_calls")
    if not isinstance(calls, list) or not calls:
        return None
    logged = []
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            return None
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except (TypeError, ValueError):
            arguments = None
        logged.append(
            LoggedCall(
                id=str(call.get("id")),
                name=str(function.get("name")),
                arguments=arguments if isinstance(arguments, dict) else None,
            )
        )
    return logged


def _same_json(a: Any, b: Any) -> bool:
    """Equal as JSON, types included (1, 1.0 and true are three different arguments)."""
    try:
        return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    except (TypeError, ValueError):
        return False


@dataclass
class AgentState:
    step: Step = Step.MODEL
    message_count: int = 0
    batch: list[CallState] = field(default_factory=list)
    model_calls: int = 0
    output: str | None = None
    # v2: invalid tool calls so far (bounded per run), and when the current human wait began.
    invalid_calls: int = 0
    waiting_since: str | None = None
    # v6, never stored: the assistant message whose tool calls the open batch is (the log's
    # message at `batch_position`). The loop sets it with the batch, `resolve_batch` on load;
    # `to_snapshot` leaves out of each call what this message already says.
    batch_message: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    # v6, never stored: the batch's entries as loaded, until `resolve_batch` has checked them
    # against the log (None once it has, or when the state was not loaded from a snapshot).
    loaded_batch: list[dict[str, Any]] | None = field(default=None, compare=False, repr=False)

    @property
    def batch_position(self) -> int:
        """Where the open batch's assistant message is in the log: the last message covered."""
        return self.message_count - 1

    @property
    def needs_log(self) -> bool:
        """Loaded with calls whose names or arguments are in the log: resolve before use."""
        return any("name" not in e or "arguments" not in e for e in self.loaded_batch or ())

    def resolve_batch(self, message: dict[str, Any] | None) -> None:
        """Check the open batch against `message`, the log's message at `batch_position`, and
        take from it each call's name and arguments where the snapshot left them out.

        SnapshotError, and nothing changes, when it is not the batch's assistant message: not
        an assistant message with tool calls, another number of calls, another id or name at
        any place. The batch never runs with arguments from some other message."""
        logged = logged_calls(message)
        where = f"the log's message at position {self.batch_position}"
        if logged is None or len(logged) != len(self.batch):
            raise SnapshotError(
                f"{where} is not the open batch's assistant message ({len(self.batch)} calls)"
            )
        entries = self.loaded_batch or [call.to_dict() for call in self.batch]
        for call, entry, log in zip(self.batch, entries, logged, strict=True):
            if call.id != log.id or ("name" in entry and call.name != log.name):
                raise SnapshotError(f"{where} holds {log.id} ({log.name}) where the batch has {call.id}")
        for call, entry, log in zip(self.batch, entries, logged, strict=True):
            call.name = log.name
            if "arguments" not in entry:
                call.arguments = copy.deepcopy(log.arguments)
        self.batch_message, self.loaded_batch = copy.deepcopy(message), None

    def open_calls(self, status: CallStatus) -> list[CallState]:
        return [call for call in self.batch if call.status == status]

    def followed_up(self) -> AgentState:
        """The state a follow-up user message starts from (a thread's next turn): the finished
        conversation plus that one message, which the host appends to the log at position
        `message_count`; the model speaks next. Counters carry on, so the run's limits hold
        across the whole thread and new call ids never repeat old ones."""
        if self.step != Step.DONE:
            raise SnapshotError(f"only a finished conversation takes a follow-up; this one is at {self.step}")
        return replace(
            self,
            step=Step.MODEL,
            message_count=self.message_count + 1,
            batch=[],
            output=None,
            waiting_since=None,
            batch_message=None,
            loaded_batch=None,
        )

    def to_snapshot(self) -> dict[str, Any]:
        # v5: fields at their defaults are left out (a run writes two checkpoints per model
        # turn, and most of each is defaults: the storage target of `make bench` #5). `message_count`
        # always stays: the stores index on it.
        if self.needs_log:
            raise SnapshotError(
                "the open batch was loaded without its names and arguments: resolve_batch first"
            )
        data = _without_defaults(self, {spec.name: getattr(self, spec.name) for spec in fields(self)})
        for unstored in ("batch", *UNSTORED):
            data.pop(unstored, None)
        data["message_count"] = self.message_count
        # v6: the step is left out where the batch implies it (tools while one is open).
        if self.step == _implied_step(bool(self.batch)):
            data.pop("step", None)
        else:
            data["step"] = self.step
        if self.batch:
            # Only against the batch's own message: any other (or none) and each call is whole.
            logged = logged_calls(self.batch_message) or []
            if [log.id for log in logged] != [call.id for call in self.batch]:
                data["batch"] = [call.to_dict() for call in self.batch]
            else:
                data["batch"] = [call.to_dict(log) for call, log in zip(self.batch, logged, strict=True)]
        data["schema_version"] = SCHEMA_VERSION
        return data

    @classmethod
    def from_snapshot(cls, snapshot: dict[str, Any]) -> AgentState:
        data = migrate(dict(snapshot))
        data.pop("schema_version")
        if UNSTORED & data.keys():  # what the log says is read from the log, never from here
            raise SnapshotError(f"a snapshot never holds {sorted(UNSTORED & data.keys())}")
        entries = copy.deepcopy(data.pop("batch", None) or [])
        data["step"] = Step(data["step"]) if "step" in data else _implied_step(bool(entries))
        data["batch"] = [CallState.from_dict(entry) for entry in entries]
        return cls(**data, loaded_batch=entries or None)


# AgentState's fields that a snapshot never holds (v6).
UNSTORED = frozenset({"batch_message", "loaded_batch"})


def _implied_step(batch_open: bool) -> Step:
    """v6: the step a snapshot leaves out. A batch is open only while its calls settle."""
    return Step.TOOLS if batch_open else Step.MODEL


def _without_defaults(instance: Any, data: dict[str, Any]) -> dict[str, Any]:
    """`data` less the fields whose value equals the dataclass default; required fields stay."""
    for spec in fields(instance):
        if spec.default is not MISSING:
            default = spec.default
        elif spec.default_factory is not MISSING:
            default = spec.default_factory()
        else:
            continue
        if data[spec.name] == default:
            del data[spec.name]
    return data


def _v1_to_v2(snapshot: dict[str, Any]) -> dict[str, Any]:
    # v1 did not count invalid calls; a v1 batch still awaiting approval started
    # waiting at an unknown time, so no wait notice is given for it.
    return {**snapshot, "invalid_calls": 0, "waiting_since": None}


def _v2_to_v3(snapshot: dict[str, Any]) -> dict[str, Any]:
    # v3 only adds the call status "unknown_effect"; every v2 snapshot is a valid v3 one.
    # The version still moves, so that v2 code refuses a v3 snapshot it could not read.
    return dict(snapshot)


def _v3_to_v4(snapshot: dict[str, Any]) -> dict[str, Any]:
    # v4 adds each call's `grant_id`; a v3 call was never allowed by a grant.
    batch = [{**call, "grant_id": None} for call in snapshot.get("batch") or []]
    return {**snapshot, "batch": batch}


def _v4_to_v5(snapshot: dict[str, Any]) -> dict[str, Any]:
    # v5 may leave out fields at their defaults; a complete v4 snapshot is a valid v5 one.
    # The version still moves, so that v4 code refuses a v5 snapshot it would misread.
    return dict(snapshot)


def _v5_to_v6(snapshot: dict[str, Any]) -> dict[str, Any]:
    # v6 lets a call's entry leave out its name and arguments (the log's message holds them);
    # a v5 entry holds them, so they stay. A left-out step now follows the batch: a v5 one
    # meant `model`, so it is written out wherever a batch would imply another.
    if snapshot.get("batch") and "step" not in snapshot:
        return {**snapshot, "step": Step.MODEL.value}
    return dict(snapshot)


# MIGRATORS[n] upgrades a version-n snapshot to version n + 1.
MIGRATORS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {
    1: _v1_to_v2,
    2: _v2_to_v3,
    3: _v3_to_v4,
    4: _v4_to_v5,
    5: _v5_to_v6,
}


def migrate(snapshot: dict[str, Any]) -> dict[str, Any]:
    version = snapshot.get("schema_version")
    if not isinstance(version, int) or version < 1:
        raise SnapshotError(f"snapshot has no valid schema_version: {version!r}")
    if version > SCHEMA_VERSION:
        raise SnapshotError(f"snapshot schema_version {version} is newer than this code ({SCHEMA_VERSION})")
    while version < SCHEMA_VERSION:
        if version not in MIGRATORS:
            raise SnapshotError(f"no migrator from schema_version {version}")
        snapshot = MIGRATORS[version](snapshot)
        version += 1
        snapshot["schema_version"] = version
    return snapshot
