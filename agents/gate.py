"""The approval gate: the only road from a tool call to its side effect.

It sits inside the tool's execution path, not in any view: whatever asked for
the call, a tool that needs approval runs only after the gate has verified an
Ed25519-signed decision bound to exactly this run, checkpoint, call, tool and
argument hash, consumed it, and written the ledger row.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from agents.canonical import canonical_json, sha256_hex
from agents.tools import Effect, Tool, ToolContext, ToolError

APPROVING_VERDICTS = ("approve", "edit")
# Authorises running again a call whose effect is unknown (its worker died mid-call).
RERUN_VERDICTS = ("rerun",)


class DecisionRefused(Exception):
    """The decision does not authorise this call; the tool did not run."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class EffectUnknown(Exception):
    """A previous attempt may or may not have performed this effect: a human must say."""


@dataclass(frozen=True)
class SignedDecision:
    decision_id: str
    verdict: str
    arguments: dict[str, Any]  # the arguments to run: the edited ones for an edit
    payload: dict[str, Any]
    signature: str  # base64
    key_id: str


@dataclass(frozen=True)
class CallBinding:
    run_id: str
    checkpoint_id: str | None
    tool_call_id: str
    tool: str

    @property
    def idempotency_key(self) -> str:
        return f"{self.run_id}:{self.tool_call_id}"


@dataclass(frozen=True)
class LedgerEntry:
    key: str
    status: str  # pending | confirmed | unknown
    result: Any


class Keyring(Protocol):
    def public_key(self, key_id: str) -> Ed25519PublicKey | None: ...


class Ledger(Protocol):
    def atomic(self) -> AbstractContextManager[Any]: ...

    def entry(self, key: str) -> LedgerEntry | None: ...

    def consume(self, decision_id: str) -> bool:
        """Mark the decision consumed; False when it already was (compare-and-set)."""
        ...

    def record(
        self,
        key: str,
        *,
        binding: CallBinding,
        status: str,
        decision_id: str | None,
        result: Any = None,
    ) -> None: ...

    def confirm(self, key: str, *, result: Any) -> None: ...

    def mark_unknown(self, key: str) -> None: ...

    def reopen(self, key: str) -> None:
        """unknown -> pending, for a re-run a reviewer authorised."""
        ...


def _utcnow() -> datetime:
    return datetime.now(UTC)


class ApprovalGate:
    def __init__(
        self,
        *,
        keyring: Keyring,
        ledger: Ledger,
        reviewer_allowed: Callable[[str, str], bool],
        now: Callable[[], datetime] = _utcnow,
    ) -> None:
        self.keyring = keyring
        self.ledger = ledger
        self.reviewer_allowed = reviewer_allowed
        self.now = now

    def verify(
        self,
        decision: SignedDecision,
        binding: CallBinding,
        *,
        verdicts: tuple[str, ...] = APPROVING_VERDICTS,
    ) -> None:
        """Raise DecisionRefused unless `decision` authorises exactly this call."""
        payload = decision.payload
        public_key = self.keyring.public_key(decision.key_id)
        if public_key is None:
            raise DecisionRefused(f"unknown signing key {decision.key_id!r}")
        if payload.get("key_id") != decision.key_id:
            raise DecisionRefused("key id does not match the signed payload")
        try:
            signature = base64.b64decode(decision.signature, validate=True)
            public_key.verify(signature, canonical_json(payload))
        except (InvalidSignature, binascii.Error, ValueError):
            raise DecisionRefused("signature does not verify") from None
        expected = {
            "decision_id": decision.decision_id,
            "run_id": binding.run_id,
            "checkpoint_id": binding.checkpoint_id,
            "tool_call_id": binding.tool_call_id,
            "tool": binding.tool,
            "verdict": decision.verdict,
            "arguments_sha256": sha256_hex(decision.arguments),
        }
        for name, value in expected.items():
            if payload.get(name) != value:
                raise DecisionRefused(f"decision is not bound to this call ({name} differs)")
        if decision.verdict not in verdicts:
            raise DecisionRefused(f"verdict {decision.verdict!r} does not approve this call")
        try:
            not_after = datetime.fromisoformat(payload["not_after"])
        except (KeyError, TypeError, ValueError):
            raise DecisionRefused("decision has no valid not_after") from None
        if not_after.tzinfo is None:  # comparing it with an aware now() would raise TypeError
            raise DecisionRefused("decision has no valid not_after (no time zone)")
        if self.now() >= not_after:
            raise DecisionRefused("decision has expired")
        if not self.reviewer_allowed(str(payload.get("reviewer")), binding.run_id):
            raise DecisionRefused("reviewer is no longer allowed to approve this run")

    def execute(
        self,
        *,
        tool: Tool,
        binding: CallBinding,
        arguments: dict[str, Any],
        decision: SignedDecision | None,
        ctx: ToolContext,
    ) -> Any:
        """Run the tool at most once for this call; return its (possibly recorded) result."""
        key = binding.idempotency_key
        entry = self.ledger.entry(key)
        if entry is not None and entry.status == "confirmed":
            return entry.result  # finished before: never run twice, reuse the result
        if entry is not None and not (
            entry.status == "pending" and tool.effect == Effect.IDEMPOTENT_EXTERNAL
        ):
            # A re-run applies to an effect a human found unknown. A `pending` one means the
            # previous attempt (perhaps itself a re-run) was cut short: that goes to a human again.
            if entry.status == "unknown" and decision is not None and decision.verdict in RERUN_VERDICTS:
                return self._rerun(tool=tool, binding=binding, decision=decision, ctx=ctx)
            if entry.status == "pending":
                self.ledger.mark_unknown(key)
            raise EffectUnknown(f"{tool.name} may already have run for {binding.tool_call_id}")
        if decision is not None and decision.verdict in RERUN_VERDICTS:
            raise DecisionRefused("a re-run decision only applies to an effect whose outcome is unknown")

        if decision is None and tool.needs_approval(arguments):
            raise DecisionRefused("this call needs an approved decision and has none")
        if decision is not None:
            self.verify(decision, binding)
            arguments = decision.arguments

        if tool.effect == Effect.READ and decision is None:
            return _run(tool, arguments, ctx)
        if tool.effect in (Effect.READ, Effect.DATABASE):
            # The effect, the consumption and the ledger row commit together.
            with self.ledger.atomic():
                self._consume(decision)
                try:
                    with self.ledger.atomic():  # a savepoint: a ToolError undoes the effect only
                        result = tool.run(arguments, ctx)
                except ToolError as exc:
                    result = {"error": str(exc)}
                self.ledger.record(
                    key,
                    binding=binding,
                    status="confirmed",
                    decision_id=decision and decision.decision_id,
                    result=result,
                )
            return result

        if entry is None:
            with self.ledger.atomic():
                self._consume(decision)
                self.ledger.record(
                    key,
                    binding=binding,
                    status="pending",
                    decision_id=decision and decision.decision_id,
                )
        result = _run(tool, arguments, ctx)
        self.ledger.confirm(key, result=result)
        return result

    def _rerun(self, *, tool: Tool, binding: CallBinding, decision: SignedDecision, ctx: ToolContext) -> Any:
        """A reviewer checked that an interrupted effect did not happen and signed a re-run."""
        self.verify(decision, binding, verdicts=RERUN_VERDICTS)
        with self.ledger.atomic():
            if not self.ledger.consume(decision.decision_id):
                # Used already: that re-run started and was cut short before a new
                # reconciliation could be saved. Back to a human; never run it again here.
                raise EffectUnknown(f"the authorised re-run of {tool.name} was interrupted")
            self.ledger.reopen(binding.idempotency_key)
        result = _run(tool, decision.arguments, ctx)
        self.ledger.confirm(binding.idempotency_key, result=result)
        return result

    def _consume(self, decision: SignedDecision | None) -> None:
        if decision is not None and not self.ledger.consume(decision.decision_id):
            raise DecisionRefused("decision has already been used")


def _run(tool: Tool, arguments: dict[str, Any], ctx: ToolContext) -> Any:
    try:
        return tool.run(arguments, ctx)
    except ToolError as exc:
        return {"error": str(exc)}
