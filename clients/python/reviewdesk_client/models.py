"""The client's records: a call to submit, the ticket kept for it, an outcome, a verified decision."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

VERDICTS = ("approve", "reject", "edit")
# Statuses an approval leaves `pending` for; none of them changes again.
SETTLED = ("approved", "rejected", "expired", "cancelled")


@dataclass(frozen=True)
class Call:
    """One gated tool call, as submitted. `arguments_sha256` is computed by `DeskClient.call`
    from the arguments as the framework holds them; the desk recomputes it and refuses a mismatch."""

    tool_call_id: str
    tool: str
    arguments: Any
    arguments_sha256: str
    schema: dict[str, Any] | None = None
    verdicts: tuple[str, ...] = VERDICTS
    description: str = ""
    reason: str = ""  # the model's own words: untrusted, shown as such
    preview: str = ""  # the adapter's rendering of the effect: untrusted too
    reviewers: tuple[str, ...] | None = None
    required_approvals: int | None = None

    def body(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "tool_call_id": self.tool_call_id,
            "tool": self.tool,
            "arguments": self.arguments,
            "arguments_sha256": self.arguments_sha256,
            "schema": self.schema,
            "verdicts": list(self.verdicts),
            "description": self.description,
            "reason": self.reason,
            "preview": self.preview,
        }
        if self.reviewers is not None:
            data["reviewers"] = list(self.reviewers)
        if self.required_approvals is not None:
            data["required_approvals"] = self.required_approvals
        return data


@dataclass(frozen=True)
class Ticket:
    """What the client keeps of one submitted call: the desk's ids the decision must be bound to,
    and the hash of the arguments as submitted. Written to the store before `submit` returns."""

    approval_id: str
    run_id: str
    checkpoint_id: str
    audience: str
    external_id: str
    external_checkpoint: str
    tool_call_id: str
    tool: str
    arguments_sha256: str
    verdicts: tuple[str, ...]
    url: str = ""
    status: str = "pending"

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["verdicts"] = list(self.verdicts)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Ticket:
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in names}
        values["verdicts"] = tuple(values.get("verdicts", ()))
        return cls(**values)


@dataclass(frozen=True)
class Outcome:
    """An approval that is no longer pending: its status and, for approved and rejected, the
    settling decision as the desk serves it (unverified: pass it to `DeskClient.verify`)."""

    status: str
    decision: dict[str, Any] | None
    approval: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class Verified:
    """A decision that passed every local check. `arguments` are the ones to run: the edited ones
    for an edit, else the framework's own. Single use: `DeskClient.consume` before the tool runs."""

    verdict: str
    arguments: Any
    reason: str
    reviewer: str
    decision_id: str
    nonce: str
    approval_id: str
    tool_call_id: str
    not_after: datetime
    run_id: str = ""
    tool: str = ""
    external_id: str = ""

    @property
    def approved(self) -> bool:
        """Whether the tool may run (approve or edit)."""
        return self.verdict in ("approve", "edit")

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["not_after"] = self.not_after.isoformat()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Verified:
        return cls(**{**data, "not_after": datetime.fromisoformat(data["not_after"])})
