"""What the turn loop needs, implemented on the database for one attempt of one run.

Every write is fenced: it happens in a transaction that first locks the run
row and checks that this attempt's lease epoch and the run's cancel epoch are
still current. A worker that lost its lease (it stalled, or the run was
cancelled) gets `LeaseLost` instead of writing.

A step the loop commits is kept, and written later, whole, in one fenced transaction with any
other step kept meanwhile (`write_unsaved`): before the next model call, before a tool runs
(`tool_context`, so before the ledger's writes and a retry's wait too), before the log is read,
and otherwise by `run_finish` with the outcome, in the transaction that ends the attempt
(a run's last step and its end were two fenced transactions, and two takes of the
writers' lock when the step raised approvals).
So whatever acts on the world or takes time finds every earlier step written, and a worker that
dies with a step kept loses only work it can do again from the last written one: the model's
last answer (asked again) or a settled batch (an effect's result is in the ledger, a
decision in its row, and a read runs again). One step waits through a model call: a run's
opening (the system prompt and the task, which the loop makes again from the run when nothing
is written), written with the model's first answer. When the finish fails (its transaction
rolled back, the kept steps with it), `run_execute` writes them on their own before the task
fails: the sweeper's attempt resumes from them instead of asking the model again for an answer
it gave already (which it may give otherwise).
"""

from __future__ import annotations

import copy
import logging
import threading
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model

from agents.definition import Recorded
from agents.gate import ApprovalGate, CallBinding, SignedDecision, SignedGrant
from agents.loop import DecisionState
from agents.mcp import PinStore
from agents.registry import get_agent
from agents.state import AgentState, CallState
from agents.tools import ToolContext
from reviewdesk.accounts.devicekeys import DatabaseTrust
from reviewdesk.approvals.access import may_decide_by_name
from reviewdesk.approvals.grants.use import grant_matching_call, grantor_may_decide_by_name, signed_grant
from reviewdesk.approvals.lifecycle.raising import approval_raise
from reviewdesk.approvals.lifecycle.routing import named_for_call, targets_for_call
from reviewdesk.approvals.reads.decisions import RequestDeciders, call_decision_read, reviewer_notes_for
from reviewdesk.approvals.signing import FileKeyring, device_decision_required
from reviewdesk.audit.services import audit_record
from reviewdesk.lib import faults
from reviewdesk.lib.db import atomic_appends_last
from reviewdesk.lib.tool_world import sandbox_config, tool_world
from reviewdesk.runs.checkpoints import DatabaseCheckpointStore
from reviewdesk.runs.ledger import DatabaseLedger
from reviewdesk.runs.models import Attempt, Message, Run, RunStatus
from reviewdesk.runs.rows import RunOwner, messages_insert, run_owner

logger = logging.getLogger(__name__)


class LeaseLost(Exception):
    """This attempt no longer owns the run; its write was rejected."""


class StepWriteFailed(Exception):
    """Writing the steps kept failed (`write_unsaved_fenced`); the cause is chained."""


class DatabaseHost:
    def __init__(self, *, run: Run, attempt: Attempt) -> None:
        self.run = run
        self.attempt = attempt
        self.run_id = str(run.id)
        self.run_input = run.input
        # A retry from an earlier checkpoint starts a new branch: its call ids never reuse old ones.
        self.call_id_prefix = f"call_b{run.branch}" if run.branch else "call"
        self.checkpoints = DatabaseCheckpointStore(attempt_id=attempt.id, branch=run.branch)
        self.ledger = DatabaseLedger(host=self)
        self.lease_lost: threading.Event = threading.Event()  # set by the LeaseKeeper
        self._log: list[dict[str, Any]] | None = None  # the live messages, once read (see messages)
        self._unsaved: list[_Step] = []  # committed by the loop, not written yet (write_unsaved)
        self._fresh = False  # nothing of the run was written when this attempt loaded it
        self._deciders: RequestDeciders | None = None  # read with the last call's decision
        # Why a call goes back to a human, for its next request (call_sent_back), by call id.
        self._sent_back: dict[str, str] = {}
        self.gate = ApprovalGate(
            keyring=FileKeyring(),
            ledger=self.ledger,
            reviewer_allowed=self.reviewer_allowed,
            # Device keys (agents.trust): endorsements and revocations from the database, the
            # roots from the read-only trust file; a database writer cannot forge either's signature.
            device_trust=DatabaseTrust(),
            device_required=self.device_required,
            grantor_allowed=grantor_may_decide_by_name,
            agent=run.agent,
        )

    def device_required(self, tool: str) -> bool:
        """Only a decision signed by the reviewer's device key runs `tool` (everywhere when
        DESK_REQUIRE_DEVICE_KEYS is on; else when the agent or the tool asks for it)."""
        return device_decision_required(agent=self.run.agent, tool=tool)

    def check_lease(self) -> None:
        """Stop early once the heartbeat found the lease gone (cancelled, or taken over)."""
        if self.lease_lost.is_set() and not faults.fencing_disabled():
            raise LeaseLost(f"attempt {self.attempt.number} of run {self.run.pk} lost its lease")

    def fence(self) -> None:
        """Lock the run row and check this attempt still owns it. Call inside atomic().
        Reads the three columns the check needs, not the whole row (its JSON fields decoded
        for nothing)."""
        self.check_lease()
        self._checked(run_owner(self.run.pk, lock=True))

    def check_owned(self) -> None:
        """`fence` without the lock, outside a transaction: one read that says whether this
        attempt still owns the run (a cancel or a lost lease raises LeaseLost), for a check
        before a step that writes nothing."""
        self.check_lease()
        self._checked(run_owner(self.run.pk, lock=False))

    def _checked(self, run: RunOwner) -> RunOwner:
        if faults.fencing_disabled():
            return run
        if (
            run.status != RunStatus.RUNNING
            or run.lease_epoch != self.attempt.lease_epoch
            or run.cancel_epoch != self.run.cancel_epoch
        ):
            raise LeaseLost(
                f"attempt {self.attempt.number} of run {run.id} lost its lease "
                f"(status {run.status}, lease epoch {run.lease_epoch} vs {self.attempt.lease_epoch})"
            )
        return run

    # --- the loop's interface -------------------------------------------------
    def load(self) -> AgentState | None:
        # With the messages the checkpoint covers, which the loop asks for next: one round trip.
        latest = self.checkpoints.latest_with_messages(self.run_id)
        if latest is None:
            self._log = []  # messages are only ever written with a checkpoint, in one transaction
            self._fresh = True
            return None
        checkpoint, self._log = latest
        return AgentState.from_snapshot(checkpoint.snapshot)

    def messages(self, count: int) -> list[dict[str, Any]]:
        # Read once per attempt, then kept up to date by commit_step: only the lease holder
        # writes a running run's messages, so re-reading would return what we just wrote.
        if self._log is None or len(self._log) < count:
            self.write_unsaved()  # what is read must include what was kept
            rows = Message.objects.filter(
                run_id=self.run.pk, position__lt=count, superseded_at__isnull=True
            ).order_by("position")
            self._log = [row.body for row in rows]
        return copy.deepcopy(self._log[:count])

    def set_aside_messages(self) -> list[dict[str, Any]]:
        # Only a retry from an earlier checkpoint sets messages aside, and it starts a branch:
        # a run on its first branch reads nothing here.
        if not self.run.branch:
            return []
        rows = Message.objects.filter(run_id=self.run.pk, superseded_at__isnull=False)
        return [row.body for row in rows.order_by("superseded_at", "position")]

    def commit_step(
        self,
        *,
        checkpoint_id: str,
        state: AgentState,
        new_messages: list[dict[str, Any]],
        raise_approvals: list[CallState],
    ) -> None:
        """Keep the step, as it is now, for the next write (see the module's docstring)."""
        start = state.message_count - len(new_messages)
        self._unsaved.append(
            _Step(
                checkpoint_id=checkpoint_id,
                snapshot=state.to_snapshot(),
                start=start,
                new_messages=copy.deepcopy(new_messages),
                raise_approvals=copy.deepcopy(raise_approvals),
                opening=self._fresh and start == 0 and not raise_approvals,
            )
        )
        # The live log is ours to keep: only the lease holder writes a running run's messages,
        # and a write that is refused ends the attempt.
        if self._log is not None and len(self._log) == start:
            self._log.extend(copy.deepcopy(new_messages))
        else:
            self._log = None  # out of step: read again next time (after writing what is kept)

    def write_unsaved(self, *, before_model_call: bool = False) -> None:
        """Write the steps kept since the last write, in one fenced transaction; before a model
        call, not when all there is is the run's opening (see the module's docstring)."""
        if before_model_call and all(step.opening for step in self._unsaved):
            # Nothing worth a transaction, but the model is not called for a run that was
            # cancelled or taken over since the claim (the heartbeat says so only later).
            self.check_owned()
            return
        if self._unsaved:
            with atomic_appends_last():
                self.fence()
                self.write_unsaved_fenced()

    def kept(self) -> list[_Step]:
        """The steps kept now (to `keep_again` should the transaction writing them roll back)."""
        return list(self._unsaved)

    def keep_again(self, steps: list[_Step]) -> None:
        """Keep `steps` again, ahead of any kept since, when a rolled-back transaction had
        taken them (those still kept are kept once)."""
        taken = [step for step in steps if all(step is not kept for kept in self._unsaved)]
        self._unsaved = [*taken, *self._unsaved]

    def write_unsaved_fenced(self) -> set[str]:
        """Write the steps kept, in the order taken; the ids of the calls whose requests they
        raised. Lock precondition: in the caller's transaction, the run row is locked and this
        attempt's lease and cancel epochs were checked (`fence`, or `run_finish`'s own check)."""
        steps, self._unsaved = self._unsaved, []
        if not steps:
            return set()
        messages_insert(
            [
                Message(run_id=self.run.pk, position=step.start + i, role=m["role"], body=m)
                for step in steps
                for i, m in enumerate(step.new_messages)
            ]
        )
        checkpoints = self.checkpoints.put_many(
            self.run_id, [(step.snapshot, step.checkpoint_id) for step in steps]
        )
        faults.point("during_checkpoint_save")
        raised: set[str] = set()
        for step, checkpoint in zip(steps, checkpoints, strict=True):
            # The run as the task claimed it: a request reads what was fixed at submission
            # (agent, reviewers, TTL, input, submitter), and the caller holds the row lock that
            # approval_raise expects (no second read of the whole row).
            for call in step.raise_approvals:
                approval_raise(
                    run=self.run,
                    attempt=self.attempt,
                    checkpoint_id=checkpoint.id,
                    call=call,
                    reason=self._sent_back.get(call.id),
                    # The messages just written are in it: provenance reads no row again.
                    log=self._log,
                )
                raised.add(call.id)
        return raised

    def decision_for(self, call: CallState) -> DecisionState:
        if any(c.id == call.id for step in self._unsaved for c in step.raise_approvals):
            return None  # its request is not even written yet: nobody can have decided it
        state, self._deciders = call_decision_read(run=self.run, call=call)
        return state

    def reviewer_allowed(self, username: str, run_id: str, request_id: str) -> bool:
        """The gate's check that a reviewer still qualifies, at execution time: answered once
        from the rows read with the call's decision (just before the gate), else read afresh."""
        answer = self._deciders.take(username, run_id, request_id) if self._deciders else None
        return may_decide_by_name(username, run_id, request_id) if answer is None else answer

    def reviewer_notes(self, call_ids: list[str]) -> list[str]:
        return reviewer_notes_for(run_id=self.run.pk, call_ids=call_ids, gate=self.gate)

    def grant_for(self, call: CallState) -> str | None:
        return grant_matching_call(run=self.run, call=call)

    def grant(self, grant_id: str) -> SignedGrant | None:
        return signed_grant(grant_id)

    def tool_context(self, call: CallState) -> ToolContext:
        """The context the call runs with; the loop asks for it just before the call runs, so
        the steps kept are written first: a tool acts on the world (see the module's docstring)."""
        self.write_unsaved()
        return ToolContext(
            run_id=self.run_id,
            tool_call_id=call.id,
            idempotency_key=CallBinding(self.run_id, None, call.id, call.name).idempotency_key,
            workdir=settings.DESK_RUNS_DIR / self.run_id,
            world=tool_world(),
            timeout_seconds=settings.DESK_EXECUTE_TIMEOUT_SECONDS,
            sandbox=sandbox_config(),
        )

    def policy_world(self) -> Any:
        return tool_world()

    # --- the definition the run goes on under (agents.definition.DefinitionHost) ------------
    def recorded_definition(self) -> Recorded:
        return Recorded(self.run.definition_sha256, self.run.definition_digests or None)

    def definition_adopted(self, *, sha256: str, digests: dict[str, Any], changes: list[str]) -> None:
        """Record on the run the definition it goes on under, and say on its timeline what
        changed (an audit row of the run), fenced, with the steps kept so far."""
        summary = "the agent's definition changed since this run started: " + "; ".join(changes)
        with atomic_appends_last():
            self.fence()
            self.write_unsaved_fenced()
            Run.objects.filter(pk=self.run.pk).update(definition_sha256=sha256, definition_digests=digests)
            audit_record(
                actor=None,
                action="run.definition_changed",
                subject_type="run",
                subject_id=self.run.pk,
                data={
                    "from_sha256": self.run.definition_sha256,
                    "to_sha256": sha256,
                    "changes": changes,
                    "summary": summary,
                },
            )
        self.run.definition_sha256, self.run.definition_digests = sha256, digests

    def call_sent_back(self, call: CallState, reason: str) -> None:
        self._sent_back[call.id] = reason

    def call_gone(self, call: CallState, reason: str) -> None:
        """The call's tool is gone: the model reads the error; the run's timeline says so."""
        with atomic_appends_last():
            self.fence()
            self.write_unsaved_fenced()
            audit_record(
                actor=None,
                action="run.call_failed",
                subject_type="run",
                subject_id=self.run.pk,
                data={"tool_call_id": call.id, "tool": call.name, "summary": f"{call.id}: {reason}"},
            )

    def routed_elsewhere(self, call: CallState, decision: SignedDecision) -> str | None:
        """Whether each reviewer who decided the call would be named for it were its request
        raised now (the routing and the quorum's groups now in force: `named_for_call`)."""
        arguments = decision.arguments  # what runs: an edit's own, not the model's
        for vote in (decision, *decision.co_decisions):
            username = str(vote.payload.get("reviewer"))
            user = get_user_model().objects.filter(username=username).first()
            if user is None or not named_for_call(user, self.run, call.name, arguments):
                named = ", ".join(targets_for_call(run=self.run, tool_name=call.name, arguments=arguments))
                groups = _quorum_groups(self.run, call.name)
                votes = f", votes counted from {', '.join(groups)} only" if groups else ""
                return f"{call.name} is now routed to {named or 'any reviewer'}{votes}; {username} is not among them"
        return None

    def mcp_pins(self) -> PinStore:
        return desk_pin_store()


def _quorum_groups(run: Run, tool_name: str) -> list[str]:
    tool = get_agent(run.agent).tool(tool_name)
    return [f"group:{g}" for g in tool.quorum.groups] if tool is not None else []


def desk_pin_store() -> PinStore:
    """The desk's pinned MCP tool definitions (reviewdesk.mcp.pins), for the worker's
    reconcile and for every process's lookups of MCP tools (agents.mcp.use_pin_store)."""
    from reviewdesk.mcp.pins import DjangoPinStore  # the pins app imports the runs' neighbours

    return DjangoPinStore()


@dataclass(frozen=True)
class _Step:
    """A step the loop committed, kept for the host's next write: its state as it was then."""

    checkpoint_id: str
    snapshot: dict[str, Any]
    start: int  # the log position of its first new message
    new_messages: list[dict[str, Any]]
    raise_approvals: list[CallState]
    opening: bool  # the run's first step, made again from the run when nothing is written
