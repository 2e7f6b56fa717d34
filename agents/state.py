"""The checkpoint snapshot: where the turn loop stands, and each pending call's state.

Messages are not in the snapshot: they live in the run's append-only log and
the snapshot records how many of them it covers (`message_count`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from enum import StrEnum
from typing import Any

SCHEMA_VERSION = 5


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

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CallState:
        return cls(**{**data, "status": CallStatus(data["status"])})

    def to_dict(self) -> dict[str, Any]:
        return _without_defaults(self, asdict(self))


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
        )

    def to_snapshot(self) -> dict[str, Any]:
        # v5: fields at their defaults are left out (a run writes two checkpoints per model
        # turn, and most of each is defaults: issue 11's storage target). `message_count`
        # always stays: the stores index on it.
        data = _without_defaults(self, asdict(self))
        data["message_count"] = self.message_count
        if self.batch:
            data["batch"] = [call.to_dict() for call in self.batch]
        data["schema_version"] = SCHEMA_VERSION
        return data

    @classmethod
    def from_snapshot(cls, snapshot: dict[str, Any]) -> AgentState:
        data = migrate(dict(snapshot))
        data.pop("schema_version")
        data["step"] = Step(data.get("step", Step.MODEL))
        data["batch"] = [CallState.from_dict(call) for call in data.get("batch", [])]
        return cls(**data)


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


# MIGRATORS[n] upgrades a version-n snapshot to version n + 1.
MIGRATORS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {
    1: _v1_to_v2,
    2: _v2_to_v3,
    3: _v3_to_v4,
    4: _v4_to_v5,
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
