"""In-memory implementations of the runtime's interfaces, for tests and for writing agents.

    host = InMemoryHost(run_input="Refund Ada's order")
    outcome = advance(agent=get_agent("demo"), provider=ScriptedProvider(script), host=host)
    # Waiting(...): a reviewer decides, as the desk would, with a signed decision
    host.approve(outcome.call_ids[0])
    outcome = advance(agent=get_agent("demo"), provider=ScriptedProvider(script), host=host)
    assert host.world.emails[0].to == "ada@example.com"

Nothing here cuts a corner the database implementations do not: the ledger's
`atomic()` rolls back on an exception (nested blocks too, like savepoints),
`consume` is a compare-and-set, a ledger key and a message position can be
written only once, checkpoints are stored as JSON (so a snapshot that would not
survive the database fails here too), and the gate verifies decisions with
public keys only. Decisions are signed exactly as the desk signs them
(`reviewdesk.approvals.services.approval_do_decide`).
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import secrets
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, Protocol

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from agents.canonical import canonical_json, sha256_hex
from agents.gate import ApprovalGate, CallBinding, LedgerEntry, SignedDecision
from agents.loop import DecisionState, Reconciled, Rejected
from agents.state import AgentState, CallState, CallStatus
from agents.store import InMemoryCheckpointStore
from agents.tools import ToolContext

__all__ = [
    "InMemoryHost",
    "InMemoryLedger",
    "LedgerConflict",
    "LedgerRow",
    "RecordingWorld",
    "Refund",
    "SentEmail",
    "StaticKeyring",
    "Transactional",
    "generate_signing_key",
    "key_id_for",
    "sign_decision",
    "sign_payload",
]

DEFAULT_DECISION_VALID = timedelta(hours=24)  # the desk's DESK_DECISION_VALID_SECONDS default


# --- keys and signed decisions ------------------------------------------------------


def key_id_for(public_key: Ed25519PublicKey) -> str:
    """The desk's key id format: "ed25519:" and 16 hex digits of the raw key's SHA-256."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "ed25519:" + hashlib.sha256(raw).hexdigest()[:16]


def generate_signing_key() -> tuple[Ed25519PrivateKey, str]:
    """A fresh Ed25519 private key and its key id."""
    key = Ed25519PrivateKey.generate()
    return key, key_id_for(key.public_key())


class StaticKeyring:
    """Public keys by key id (implements `agents.gate.Keyring`)."""

    def __init__(self, keys: dict[str, Ed25519PublicKey] | None = None) -> None:
        self.keys: dict[str, Ed25519PublicKey] = dict(keys or {})

    @classmethod
    def of(cls, *private_keys: Ed25519PrivateKey) -> StaticKeyring:
        """A keyring holding the public halves of these keys, under their desk key ids."""
        return cls({key_id_for(k.public_key()): k.public_key() for k in private_keys})

    def public_key(self, key_id: str) -> Ed25519PublicKey | None:
        return self.keys.get(key_id)


def _iso(value: datetime) -> str:
    if value.tzinfo is None:
        raise ValueError("decision times must be timezone-aware")
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def sign_payload(private_key: Ed25519PrivateKey, payload: dict[str, Any]) -> str:
    """Base64 Ed25519 signature over the RFC 8785 canonical payload, as the desk signs."""
    return base64.b64encode(private_key.sign(canonical_json(payload))).decode()


def sign_decision(
    private_key: Ed25519PrivateKey,
    *,
    key_id: str,
    run_id: str,
    checkpoint_id: str | None,
    tool_call_id: str,
    tool: str,
    arguments: dict[str, Any],
    verdict: str = "approve",
    reviewer: str = "alice",
    not_after: datetime | None = None,
    decision_id: str | None = None,
    request_id: str | None = None,
    attempt: int | None = 1,
    issued_at: datetime | None = None,
) -> SignedDecision:
    """A decision signed like `approval_do_decide` signs it; `arguments` are the ones to run.

    For an edit, pass the edited arguments. Times must be timezone-aware.
    """
    issued_at = issued_at or datetime.now(UTC)
    not_after = not_after or issued_at + DEFAULT_DECISION_VALID
    decision_id = decision_id or str(uuid.uuid4())
    payload = {
        "decision_id": decision_id,
        "request_id": request_id or str(uuid.uuid4()),
        "run_id": str(run_id),
        "attempt": attempt,
        "checkpoint_id": None if checkpoint_id is None else str(checkpoint_id),
        "tool_call_id": tool_call_id,
        "tool": tool,
        "arguments_sha256": sha256_hex(arguments),
        "verdict": verdict,
        "reviewer": reviewer,
        "issued_at": _iso(issued_at),
        "not_after": _iso(not_after),
        "nonce": secrets.token_hex(16),
        "key_id": key_id,
    }
    return SignedDecision(
        decision_id=decision_id,
        verdict=verdict,
        arguments=copy.deepcopy(arguments),
        payload=payload,
        signature=sign_payload(private_key, payload),
        key_id=key_id,
    )


# --- the ledger -----------------------------------------------------------------------


class Transactional(Protocol):
    """Something whose state rolls back with the ledger's transactions."""

    def snapshot(self) -> Any: ...

    def restore(self, snapshot: Any) -> None: ...


class LedgerConflict(Exception):
    """A second row for the same idempotency key (the database's unique constraint)."""


@dataclass(frozen=True)
class LedgerRow:
    key: str
    run_id: str
    tool_call_id: str
    tool: str
    status: str  # pending | confirmed | unknown
    decision_id: str | None
    result: Any


class InMemoryLedger:
    """The side-effect ledger and decision consumption, in memory (implements `agents.gate.Ledger`).

    `atomic()` snapshots the rows, the consumed decision ids and every resource
    in `resources` (e.g. a `RecordingWorld`, whose refunds are DATABASE effects)
    and restores them all if the block raises; nested blocks behave like
    savepoints. It gives no isolation between threads: it is for tests.
    """

    def __init__(self, *, resources: Iterable[Transactional] = ()) -> None:
        self.rows: dict[str, LedgerRow] = {}
        self.consumed: set[str] = set()
        self.resources = list(resources)
        self._lock = threading.RLock()

    @contextmanager
    def atomic(self) -> Iterator[None]:
        with self._lock:
            saved = (dict(self.rows), set(self.consumed), [r.snapshot() for r in self.resources])
        try:
            yield
        except BaseException:
            with self._lock:
                self.rows.clear()
                self.rows.update(saved[0])
                self.consumed.clear()
                self.consumed.update(saved[1])
                for resource, state in zip(self.resources, saved[2], strict=True):
                    resource.restore(state)
            raise

    def entry(self, key: str) -> LedgerEntry | None:
        row = self.rows.get(key)
        if row is None:
            return None
        return LedgerEntry(key=key, status=row.status, result=copy.deepcopy(row.result))

    def consume(self, decision_id: str) -> bool:
        with self._lock:
            if decision_id in self.consumed:
                return False
            self.consumed.add(decision_id)
            return True

    def is_consumed(self, decision_id: str) -> bool:
        return decision_id in self.consumed

    def record(
        self,
        key: str,
        *,
        binding: CallBinding,
        status: str,
        decision_id: str | None,
        result: Any = None,
    ) -> None:
        with self._lock:
            if key in self.rows:
                raise LedgerConflict(f"the ledger already has a row for {key}")
            self.rows[key] = LedgerRow(
                key=key,
                run_id=binding.run_id,
                tool_call_id=binding.tool_call_id,
                tool=binding.tool,
                status=status,
                decision_id=decision_id,
                result=_json_copy(result),
            )

    def confirm(self, key: str, *, result: Any) -> None:
        self._transition(key, "pending", status="confirmed", result=_json_copy(result))

    def mark_unknown(self, key: str) -> None:
        self._transition(key, "pending", status="unknown")

    def reopen(self, key: str) -> None:
        self._transition(key, "unknown", status="pending")

    def reconcile(self, key: str, *, result: Any) -> None:
        """What a reviewer's "it did happen" does on the desk: unknown -> confirmed."""
        self._transition(key, "unknown", status="confirmed", result=_json_copy(result))

    def _transition(self, key: str, from_status: str, **changes: Any) -> None:
        # Like the database's `filter(status="pending").update(...)`: only a pending row moves.
        with self._lock:
            row = self.rows.get(key)
            if row is not None and row.status == from_status:
                self.rows[key] = replace(row, **changes)


# --- the demo world -------------------------------------------------------------------


@dataclass(frozen=True)
class SentEmail:
    to: str
    subject: str
    body: str
    idempotency_key: str
    message_id: str


@dataclass(frozen=True)
class Refund:
    refund_id: int
    order_id: str
    amount: Decimal
    idempotency_key: str


class RecordingWorld:
    """The demo agent's world (`agents.demo.DemoWorld`) that records every effect.

    It deliberately does not deduplicate by idempotency key: a test sees every
    call the tools made. Refunds are DATABASE effects and roll back with the
    ledger's transactions (see `InMemoryLedger(resources=...)`); an email, once
    sent, stays sent.
    """

    def __init__(self) -> None:
        self.emails: list[SentEmail] = []
        self.refunds: list[Refund] = []
        self._next_refund_id = 1

    def send_email(self, *, to: str, subject: str, body: str, idempotency_key: str) -> str:
        message_id = f"<{idempotency_key.replace(':', '.')}@agents.test>"
        self.emails.append(SentEmail(to, subject, body, idempotency_key, message_id))
        return message_id

    def refunded(self, order_id: str) -> Decimal:
        return sum((r.amount for r in self.refunds if r.order_id == order_id), Decimal(0))

    def refund(self, *, order_id: str, amount: Decimal, idempotency_key: str) -> dict[str, Any]:
        refund = Refund(self._next_refund_id, order_id, Decimal(amount), idempotency_key)
        self._next_refund_id += 1
        self.refunds.append(refund)
        return {"refund_id": refund.refund_id, "order_id": order_id, "amount": str(refund.amount)}

    def snapshot(self) -> Any:
        return list(self.refunds), self._next_refund_id

    def restore(self, snapshot: Any) -> None:
        refunds, next_id = snapshot
        self.refunds, self._next_refund_id = list(refunds), next_id


# --- the host ---------------------------------------------------------------------------


class InMemoryHost:
    """Everything the turn loop needs for one run, in memory (implements `agents.loop.Host`).

    The gate verifies decisions with `keyring`; by default the host makes a
    signing key of its own and puts its public half in the keyring, so
    `approve()` can sign as the desk would. Set `decisions[call_id]` (or use
    `approve` / `reject`) to decide a raised approval; `allowed_reviewers` is
    who the gate still lets approve.
    """

    def __init__(
        self,
        *,
        run_input: str = "Help the customer.",
        run_id: str | None = None,
        world: Any = None,
        ledger: InMemoryLedger | None = None,
        signing_key: Ed25519PrivateKey | None = None,
        keyring: StaticKeyring | None = None,
        allowed_reviewers: Iterable[str] = ("alice", "bob"),
        now: Callable[[], datetime] | None = None,
        workdir: Path | None = None,
    ) -> None:
        self.run_id = run_id or str(uuid.uuid4())
        self.run_input = run_input
        self.world = world if world is not None else RecordingWorld()
        self.ledger = ledger if ledger is not None else InMemoryLedger(resources=_transactional(self.world))
        self.signing_key = signing_key or Ed25519PrivateKey.generate()
        self.key_id = key_id_for(self.signing_key.public_key())
        self.keyring = keyring if keyring is not None else StaticKeyring.of(self.signing_key)
        self.allowed_reviewers = set(allowed_reviewers)
        gate_options = {"now": now} if now is not None else {}
        self.gate = ApprovalGate(
            keyring=self.keyring,
            ledger=self.ledger,
            reviewer_allowed=lambda reviewer, run_id: reviewer in self.allowed_reviewers,
            **gate_options,
        )
        self.checkpoints = InMemoryCheckpointStore()
        self.log: list[dict[str, Any]] = []  # the run's append-only message log
        self.approvals: list[CallState] = []  # raised approvals, as copies of the call
        self.approval_hashes: dict[str, str] = {}  # tool_call_id -> arguments_sha256
        self.decisions: dict[str, DecisionState] = {}
        self.notes: dict[str, str] = {}  # tool_call_id -> a reviewer's steering note
        self.workdir = workdir or Path(tempfile.gettempdir()) / f"agents-run-{self.run_id}"

    # --- the loop's interface ---------------------------------------------------------
    def load(self) -> AgentState | None:
        checkpoint = self.checkpoints.latest(self.run_id)
        return AgentState.from_snapshot(copy.deepcopy(checkpoint.snapshot)) if checkpoint else None

    def messages(self, count: int) -> list[dict[str, Any]]:
        return copy.deepcopy(self.log[:count])

    def commit_step(
        self,
        *,
        checkpoint_id: str,
        state: AgentState,
        new_messages: list[dict[str, Any]],
        raise_approvals: list[CallState],
    ) -> None:
        # Check everything first, then write: the step commits whole or not at all.
        start = state.message_count - len(new_messages)
        if start != len(self.log):
            raise ValueError(f"messages would start at position {start}; the log holds {len(self.log)}")
        if self.checkpoints.get(checkpoint_id) is not None:
            raise ValueError(f"checkpoint {checkpoint_id} already exists")
        # One *pending* request per call and kind, as the desk's constraint: an approval,
        # then a reconciliation if its effect was interrupted (again, if a re-run was too).
        raised = {(call.id, call.status == CallStatus.UNKNOWN) for call in self.approvals}
        for call in raise_approvals:
            kind = (call.id, call.status == CallStatus.UNKNOWN)
            if kind in raised and call.id not in self.decisions:
                raise ValueError(f"a request of this kind is still pending for {call.id}")
        snapshot = _json_copy(state.to_snapshot())
        messages = _json_copy(new_messages)
        hashes = {call.id: sha256_hex(call.arguments) for call in raise_approvals}

        self.log.extend(messages)
        self.checkpoints.put(self.run_id, snapshot, checkpoint_id=checkpoint_id)
        for call in raise_approvals:
            self.approvals.append(replace(copy.deepcopy(call), checkpoint_id=checkpoint_id))
            self.decisions.pop(call.id, None)  # the new request is pending: earlier answers do not carry over
        self.approval_hashes.update(hashes)

    def decision_for(self, call: CallState) -> DecisionState:
        return self.decisions.get(call.id)

    def reviewer_notes(self, call_ids: list[str]) -> list[str]:
        return [self.notes[call_id] for call_id in call_ids if call_id in self.notes]

    def tool_context(self, call: CallState) -> ToolContext:
        return ToolContext(
            run_id=self.run_id,
            tool_call_id=call.id,
            idempotency_key=CallBinding(self.run_id, None, call.id, call.name).idempotency_key,
            workdir=self.workdir,
            world=self.world,
        )

    # --- deciding, as a reviewer would ----------------------------------------------
    def approval(self, tool_call_id: str) -> CallState:
        """The raised approval for this call (KeyError when none was raised)."""
        for call in reversed(self.approvals):  # the latest: a reconciliation follows the approval
            if call.id == tool_call_id:
                return call
        raise KeyError(f"no approval was raised for {tool_call_id}")

    def sign(
        self,
        tool_call_id: str,
        *,
        verdict: str = "approve",
        arguments: dict[str, Any] | None = None,
        reviewer: str = "alice",
        not_after: datetime | None = None,
    ) -> SignedDecision:
        """A decision on the raised approval, signed with the host's key (not yet handed over)."""
        call = self.approval(tool_call_id)
        return sign_decision(
            self.signing_key,
            key_id=self.key_id,
            run_id=self.run_id,
            checkpoint_id=call.checkpoint_id,
            tool_call_id=call.id,
            tool=call.name,
            arguments=call.arguments if arguments is None else arguments,
            verdict=verdict,
            reviewer=reviewer,
            not_after=not_after,
        )

    def approve(self, tool_call_id: str, **options: Any) -> SignedDecision:
        """Sign an approval (or, with verdict="edit" and arguments, an edit) and hand it over."""
        decision = self.sign(tool_call_id, **options)
        self.decisions[tool_call_id] = decision
        return decision

    def confirm_effect(self, tool_call_id: str, *, result: Any) -> Reconciled:
        """Reconcile an unknown effect as done, with the result the reviewer recorded."""
        self.ledger.reconcile(f"{self.run_id}:{tool_call_id}", result=result)
        self.decisions[tool_call_id] = Reconciled()
        return self.decisions[tool_call_id]

    def rerun(self, tool_call_id: str, **options: Any) -> SignedDecision:
        """Sign a re-run of an unknown effect, bound to the checkpoint its reconciliation was raised at."""
        call = self.approval(tool_call_id)
        decision = sign_decision(
            self.signing_key,
            key_id=self.key_id,
            run_id=self.run_id,
            checkpoint_id=call.checkpoint_id,
            tool_call_id=call.id,
            tool=call.name,
            arguments=call.arguments,
            verdict="rerun",
            **options,
        )
        self.decisions[tool_call_id] = decision
        return decision

    def reject(self, tool_call_id: str, reason: str) -> Rejected:
        self.approval(tool_call_id)
        self.decisions[tool_call_id] = Rejected(reason)
        return self.decisions[tool_call_id]

    # --- inspection -------------------------------------------------------------------
    def state(self) -> AgentState | None:
        """The state at the latest checkpoint."""
        return self.load()


def _json_copy(value: Any) -> Any:
    """A deep copy through strict JSON: what a database JSON column would give back."""
    return json.loads(json.dumps(value, allow_nan=False))


def _transactional(world: Any) -> list[Transactional]:
    return [world] if hasattr(world, "snapshot") and hasattr(world, "restore") else []
