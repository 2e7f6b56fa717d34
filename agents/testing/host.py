"""The in-memory host: everything the turn loop needs for one run (implements `agents.loop.Host`).

Nothing here cuts a corner the database implementation does not: a message
position and a checkpoint id can be written only once, a step commits whole or
not at all, checkpoints and messages are stored as JSON (so a snapshot that
would not survive the database fails here too), and the gate verifies decisions
with public keys only.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agents.canonical import sha256_hex
from agents.decisions import SignedDecision, Verdict, key_id_for
from agents.gate import ApprovalGate, CallBinding
from agents.grants import SignedGrant, grant_mismatch
from agents.loop import DecisionState, Reconciled, Rejected
from agents.mcp import InMemoryPinStore, PinStore
from agents.sandbox import shared_tmp_dir
from agents.state import AgentState, CallState, CallStatus
from agents.store import InMemoryCheckpointStore
from agents.testing._json import json_copy
from agents.testing.keys import StaticKeyring, sign_decision, sign_grant
from agents.testing.ledger import InMemoryLedger, Transactional
from agents.testing.world import RecordingWorld
from agents.tools import ToolContext


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
        agent: str = "demo",
        pins: PinStore | None = None,
    ) -> None:
        self.run_id = run_id or str(uuid.uuid4())
        self.run_input = run_input
        self.world = world if world is not None else RecordingWorld()
        self.ledger = ledger if ledger is not None else InMemoryLedger(resources=_transactional(self.world))
        self.signing_key = signing_key or Ed25519PrivateKey.generate()
        self.key_id = key_id_for(self.signing_key.public_key())
        self.keyring = keyring if keyring is not None else StaticKeyring.of(self.signing_key)
        self.allowed_reviewers = set(allowed_reviewers)
        self.gate = ApprovalGate(
            keyring=self.keyring,
            ledger=self.ledger,
            reviewer_allowed=lambda reviewer, run_id, request_id: reviewer in self.allowed_reviewers,
            grantor_allowed=lambda reviewer, run_id, tool, arguments: reviewer in self.allowed_reviewers,
            agent=agent,
        )
        if now is not None:
            self.gate.now = now
        self.checkpoints = InMemoryCheckpointStore()
        self.pins = pins if pins is not None else InMemoryPinStore()  # MCP tools' pinned definitions
        self.log: list[dict[str, Any]] = []  # the run's append-only message log
        self.approvals: list[CallState] = []  # raised approvals, as copies of the call
        self.approval_hashes: dict[str, str] = {}  # tool_call_id -> arguments_sha256
        self.decisions: dict[str, DecisionState] = {}
        self.notes: dict[str, str] = {}  # tool_call_id -> a reviewer's steering note
        self.agent = agent
        self.grants: dict[str, SignedGrant] = {}  # standing grants by id (see `allow`)
        self.workdir = workdir or Path(shared_tmp_dir()) / f"agents-run-{self.run_id}"

    # --- the loop's interface ---------------------------------------------------------
    def load(self) -> AgentState | None:
        checkpoint = self.checkpoints.latest(self.run_id)
        return AgentState.from_snapshot(copy.deepcopy(checkpoint.snapshot)) if checkpoint else None

    def set_aside_messages(self) -> list[dict[str, Any]]:
        return []  # no retry from an earlier checkpoint here

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
        snapshot = json_copy(state.to_snapshot())
        messages = json_copy(new_messages)
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

    def mcp_pins(self) -> PinStore:
        return self.pins

    def policy_world(self) -> Any:
        return self.world

    def grant_for(self, call: CallState) -> str | None:
        # Like the desk's lookup: the first grant not revoked, not used up, covering the call.
        for grant in self.grants.values():
            live = grant.grant_id not in self.ledger.revoked and len(
                self.ledger.grant_uses.get(grant.grant_id, [])
            ) < int(grant.payload["max_uses"])
            covers = grant_mismatch(
                grant.payload, agent=self.agent, run_id=self.run_id, tool=call.name, arguments=call.arguments
            )
            if live and covers is None:
                return grant.grant_id
        return None

    def grant(self, grant_id: str) -> SignedGrant | None:
        return self.grants.get(grant_id)

    # --- deciding, as a reviewer would ----------------------------------------------
    def allow(self, tool: str, **options: Any) -> SignedGrant:
        """Sign a standing grant with the host's key (scope run, this run, by default) and store it."""
        options.setdefault("run_id", self.run_id)
        options.setdefault("agent", self.agent)
        grant = sign_grant(self.signing_key, key_id=self.key_id, tool=tool, **options)
        self.grants[grant.grant_id] = grant
        return grant

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
        verdict: str = Verdict.APPROVE,
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
            arguments=_arguments_of(call) if arguments is None else arguments,
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
        reconciled = self.decisions[tool_call_id] = Reconciled()
        return reconciled

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
            arguments=_arguments_of(call),
            verdict=Verdict.RERUN,
            **options,
        )
        self.decisions[tool_call_id] = decision
        return decision

    def reject(self, tool_call_id: str, reason: str) -> Rejected:
        self.approval(tool_call_id)
        rejected = self.decisions[tool_call_id] = Rejected(reason)
        return rejected

    # --- inspection -------------------------------------------------------------------
    def state(self) -> AgentState | None:
        """The state at the latest checkpoint, as the loop resumes it: its open batch read
        from the log (`advance` does the same)."""
        state = self.load()
        if state is not None and state.batch:
            log = self.messages(state.message_count)
            state.resolve_batch(log[state.batch_position] if len(log) == state.message_count else None)
        return state


def _arguments_of(call: CallState) -> dict[str, Any]:
    if call.arguments is None:  # only an invalid call has none, and it raises no approval
        raise ValueError(f"{call.id} has no valid arguments to sign")
    return call.arguments


def _transactional(world: Any) -> list[Transactional]:
    return [world] if hasattr(world, "snapshot") and hasattr(world, "restore") else []
