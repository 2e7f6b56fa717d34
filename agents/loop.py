"""The turn loop: state + provider + tools → outcome.

`advance` moves a run as far as it can go without a human: it calls the
model, runs the calls that need no approval, raises approvals for the rest and
returns `Waiting`; called again after decisions land, it runs the approved
calls (through the gate), feeds rejections back to the model and carries on.
Every step is committed through the host before the next one starts; the host
writes it then or keeps it until before the next tool or model call (a run's opening
may wait through the first), or until the outcome (`Host.commit_step`), so a crash resumes
from the last written step and nothing that acted on the world is done again.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol

from agents.calls import call_history, prepare_batch, storable, with_run_unique_ids
from agents.definition import DefinitionHost, Drift, arguments_misfit, drift, recheck_call, served_elsewhere
from agents.gate import (
    ApprovalGate,
    ApprovalNeeded,
    CallBinding,
    DecisionRefused,
    EffectUnknown,
    GrantRefused,
    LedgerStatus,
    SignedDecision,
    SignedGrant,
    TransientFailure,
)
from agents.grants import GrantSource, allow_by_grants, grant_of
from agents.mcp import MCPConfigurationError, PinStore, prepare_servers
from agents.notices import rejection, wait_notice
from agents.providers import ModelProvider, ProviderError
from agents.registry import Agent
from agents.state import AgentState, CallState, CallStatus, Step
from agents.tools import OnRetriesExhausted, Tool, ToolContext


@dataclass(frozen=True)
class Limits:
    max_model_calls: int = 50
    # Garbage tool calls become error results the model can correct, up to this many a run.
    max_invalid_calls: int = 10
    # A run resumed after waiting longer than this tells the model how long it waited.
    wait_notice_after: timedelta = timedelta(minutes=5)
    # Transient tool failures (ToolUnavailable): tries again after backoff, doubled each time
    # from tool_retry_backoff up to tool_retry_backoff_max seconds, at most tool_retries times
    # per call and tool_retries_per_run times in the whole run. A wait up to tool_retry_inline
    # seconds happens in the task (the lease is kept); a longer one releases the run (`Retrying`).
    tool_retries: int = 5
    tool_retries_per_run: int = 20
    tool_retry_backoff: float = 1.0
    tool_retry_backoff_max: float = 60.0
    tool_retry_inline: float = 5.0

    def tool_retry_delay(self, call_retries: int) -> float:
        """The wait before try number `call_retries + 1` (after `call_retries` failures)."""
        return float(
            min(self.tool_retry_backoff * 2 ** max(call_retries - 1, 0), self.tool_retry_backoff_max)
        )


def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Rejected:
    reason: str
    # The reviewer's signed rejection, whose signature covers `reason` (None when the desk,
    # not a reviewer, wrote the reason: an expired or cancelled request).
    decision: SignedDecision | None = None
    # True when no human decided at all (the request expired or was cancelled): not a rejection.
    undecided: bool = False


@dataclass(frozen=True)
class Reconciled:
    """A reviewer confirmed an interrupted effect did happen; the ledger holds its result."""


# What the host knows of a call's decision: nothing yet, a rejection, a reconciliation,
# or a signed decision (an approval, an edit, or a re-run of an unknown effect).
DecisionState = None | Rejected | Reconciled | SignedDecision


@dataclass(frozen=True)
class Finished:
    output: str | None


@dataclass(frozen=True)
class Waiting:
    call_ids: tuple[str, ...]


@dataclass(frozen=True)
class Retrying:
    """A tool failed transiently and the wait before its next try is long: release the run
    and resume it after `delay` seconds (the ledger row says `retrying`)."""

    call_id: str
    delay: float
    error: str


class FailureKind(StrEnum):
    TRANSIENT = "transient"  # the model server or the host's database failed; a later retry may fix it
    MODEL = "model"  # the model's own fault: a refused request, too many calls or invalid calls
    TOOL = "tool"
    UNAVAILABLE = "unavailable"  # a tool stayed unavailable through its retry budget
    APPROVAL = "approval"  # the gate refused a decision: the approval must be asked again
    INTERNAL = "internal"


@dataclass(frozen=True)
class Failed:
    error: str
    kind: FailureKind
    call_id: str | None = None


Outcome = Finished | Waiting | Retrying | Failed


class Host(GrantSource, Protocol):
    """What the loop needs from whoever runs it (the desk implements it on the database);
    GrantSource: finding and loading standing grants."""

    run_id: str
    run_input: str
    gate: ApprovalGate

    def load(self) -> AgentState | None: ...

    def messages(self, count: int) -> list[dict[str, Any]]: ...

    def set_aside_messages(self) -> list[dict[str, Any]]:
        """The messages a retry from an earlier checkpoint set aside, oldest first. What their
        calls did stays done: approval policies count them with the live history, so a limit
        "per run" is not reset by going back (two refunds of 90 are 180)."""
        ...

    def commit_step(
        self,
        *,
        checkpoint_id: str,
        state: AgentState,
        new_messages: list[dict[str, Any]],
        raise_approvals: list[CallState],
    ) -> None:
        """Atomically: append messages, save the checkpoint, raise approvals for these calls.
        Now, or kept and written with the host's next write: before a tool runs and before the
        next model call (a run's opening may wait through the first), or with the outcome (the
        desk's host: reviewdesk/runs/host.py)."""
        ...

    def decision_for(self, call: CallState) -> DecisionState: ...

    def reviewer_notes(self, call_ids: list[str]) -> list[str]:
        """Reviewers' notes on these calls' decisions, to steer the next model call.

        Each note must match its signed decision (`ApprovalGate.verify_texts`): the host
        raises DecisionRefused rather than hand the model a note nobody signed."""
        ...

    def tool_context(self, call: CallState) -> ToolContext: ...

    def policy_world(self) -> Any:
        """The world the tools act on, for approval policies that read it (`Tool.needs_approval`)."""
        ...

    def mcp_pins(self) -> PinStore:
        """Where the pinned definitions of MCP tools are kept (agents.mcp); asked only for an
        agent that declares MCP servers."""
        ...


def advance(
    *,
    agent: Agent,
    provider: ModelProvider,
    host: Host,
    limits: Limits = Limits(),
    now: Callable[[], datetime] = _utcnow,
    sleep: Callable[[float], None] = time.sleep,
) -> Outcome:
    """`sleep` waits before a short in-task retry of a transiently failed tool call."""
    if agent.mcp_servers:  # this process lists the servers' tools and checks them against the pins
        try:
            prepare_servers(agent.name, agent.tools, agent.mcp_servers, host.mcp_pins())
        except MCPConfigurationError as exc:
            return Failed(str(exc), kind=FailureKind.INTERNAL)
    state = host.load()
    if state is None:
        state = AgentState(step=Step.MODEL, message_count=2)
        first = [
            {"role": "system", "content": agent.system_prompt},
            {"role": "user", "content": host.run_input},
        ]
        _commit(host, state, first)
    elif state.batch:  # v6: the open batch's calls are the log's; check them and read what it holds
        log = host.messages(state.message_count)
        state.resolve_batch(log[state.batch_position] if len(log) == state.message_count else None)
    # Resumed under another definition of the agent: each call about to run is checked again
    # (_settle_batch); the run records the new one once no call of its batch is open.
    changed = _adopt_when_settled(host, state, drift(agent, host))

    while True:
        if state.step == Step.DONE:
            return Finished(state.output)
        if state.step == Step.MODEL:
            if state.model_calls >= limits.max_model_calls:
                return Failed(f"stopped after {limits.max_model_calls} model calls", kind=FailureKind.MODEL)
            messages = host.messages(state.message_count)
            try:
                turn = provider.complete(messages, agent.tool_specs())
            except ProviderError as exc:
                return Failed(str(exc), kind=FailureKind.TRANSIENT if exc.transient else FailureKind.MODEL)
            prefix = getattr(host, "call_id_prefix", "call")
            turn = with_run_unique_ids(storable(turn), state.model_calls, prefix)
            state.model_calls += 1
            state.message_count += 1
            if not turn.tool_calls:
                state.step, state.output = Step.DONE, turn.content
                _commit(host, state, [turn.as_message()])
                continue
            state.step = Step.TOOLS
            history = call_history([*host.set_aside_messages(), *messages])
            state.batch = prepare_batch(agent, turn.tool_calls, history, world=host.policy_world())
            state.batch_message = turn.as_message()  # the checkpoint refers to it for what it holds
            allow_by_grants(agent, host, state.batch)  # a call a standing grant allows asks no one
            state.invalid_calls += len(state.open_calls(CallStatus.INVALID))
            checkpoint_id = str(uuid.uuid4())
            awaiting = state.open_calls(CallStatus.AWAITING)
            for call in awaiting:
                call.checkpoint_id = checkpoint_id
            if awaiting:
                state.waiting_since = now().isoformat()
            _commit(host, state, [turn.as_message()], awaiting, checkpoint_id=checkpoint_id)
            if state.invalid_calls > limits.max_invalid_calls:
                return Failed(
                    f"the model made {state.invalid_calls} invalid tool calls (limit {limits.max_invalid_calls})",
                    kind=FailureKind.MODEL,
                )
            continue

        outcome = _settle_batch(agent, host, state, limits, sleep, changed)
        if outcome is not None:
            return outcome
        changed = _adopt_when_settled(host, state, changed)
        # The batch's last result reaches a checkpoint below, as its tool message (_settle_batch).
        call_ids = [call.id for call in state.batch]
        # Tool results first: each assistant tool call gets exactly one, right after it.
        new_messages = [
            {"role": "tool", "tool_call_id": call.id, "content": json.dumps(call.result)}
            for call in state.batch
        ]
        try:  # the host checks each note against its signed decision (Host.reviewer_notes)
            notes = host.reviewer_notes(call_ids)
        except DecisionRefused as exc:
            _commit(host, state, [])  # the settled batch, as it would have been without the notes
            return Failed(f"decision refused: {exc.reason}", kind=FailureKind.APPROVAL)
        new_messages += [{"role": "user", "content": note} for note in notes]
        notice = wait_notice(state.waiting_since, now(), limits.wait_notice_after)
        if notice:
            new_messages.append({"role": "user", "content": notice})
        state.message_count += len(new_messages)
        state.batch, state.step, state.waiting_since = [], Step.MODEL, None
        _commit(host, state, new_messages)


def _settle_batch(
    agent: Agent,
    host: Host,
    state: AgentState,
    limits: Limits,
    sleep: Callable[[float], None],
    changed: Drift | None = None,
) -> Outcome | None:
    """Run what can run now; None when every call of the batch has its result. `changed`: the
    definition differs from the run's, so each call is checked again first (`_recheck`)."""
    for call in state.batch:
        decision: SignedDecision | None
        if call.status == CallStatus.READY:
            decision = None
        elif call.status in (CallStatus.AWAITING, CallStatus.UNKNOWN):
            answer = host.decision_for(call)
            if answer is None:
                continue
            if isinstance(answer, Rejected):
                if answer.decision is not None:  # the reason reaches the model in the reviewer's name
                    binding = CallBinding(host.run_id, call.checkpoint_id, call.id, call.name)
                    try:
                        host.gate.verify_texts(answer.decision, binding, reason=answer.reason)
                    except DecisionRefused as exc:
                        return Failed(
                            f"decision refused: {exc.reason}", kind=FailureKind.APPROVAL, call_id=call.id
                        )
                # Nobody rejected an expired or cancelled request: the model is told so, in the host's words.
                call.result = {"error": answer.reason if answer.undecided else rejection(call, answer.reason)}
                call.status = CallStatus.REJECTED
                _commit(host, state, [], settled_one=True)
                continue
            # Reconciled: the ledger now holds the result the reviewer confirmed.
            decision = None if isinstance(answer, Reconciled) else answer
        else:
            continue
        # A reconciled call's effect happened already: nothing of it runs, nothing to check.
        runs_now = decision is not None or call.status == CallStatus.READY
        if changed is not None and runs_now and not _recheck(agent, host, state, call, decision, changed):
            continue
        if changed is None and runs_now and not _arguments_fit(agent, host, state, call, decision):
            continue
        tool = agent.tool(call.name)
        binding = CallBinding(
            run_id=host.run_id,
            checkpoint_id=call.checkpoint_id,
            tool_call_id=call.id,
            tool=call.name,
        )
        if tool is None and not runs_now and _reconciled_result(host, call, binding):
            # Its tool is gone since (a changed definition), but a reviewer confirmed what it did.
            _commit(host, state, [], settled_one=True)
            continue
        if tool is None or call.arguments is None:  # _prepare made such a call invalid: it never runs
            raise LookupError(f"{call.id} ({call.name}) has no tool or no arguments to run with")
        try:
            grant = grant_of(host, call) if call.grant_id and call.status == CallStatus.READY else None
            result = _execute_with_retries(host, tool, binding, call, decision, limits, sleep, grant)
        except (GrantRefused, ApprovalNeeded):
            _ask_instead(host, state, call)
            continue
        except DecisionRefused as exc:
            return Failed(f"decision refused: {exc.reason}", kind=FailureKind.APPROVAL, call_id=call.id)
        except EffectUnknown:
            # Never run again blindly: ask a human whether it happened.
            call.status = CallStatus.UNKNOWN
            call.checkpoint_id = str(uuid.uuid4())
            _commit(host, state, [], [call], checkpoint_id=call.checkpoint_id)
            continue
        if isinstance(result, Retrying | Failed):
            return result
        call.result = result
        call.status = CallStatus.DONE
        _commit(host, state, [], settled_one=True)
    waiting = [c for c in state.batch if c.status in (CallStatus.AWAITING, CallStatus.UNKNOWN)]
    if waiting:
        return Waiting(tuple(call.id for call in waiting))
    return None


def _execute_with_retries(
    host: Host,
    tool: Tool,
    binding: CallBinding,
    call: CallState,
    decision: SignedDecision | None,
    limits: Limits,
    sleep: Callable[[float], None],
    grant: SignedGrant | None = None,
) -> Any:
    """Run the call through the gate; on a transient failure wait and try again, in the task
    while the wait is short, else hand back `Retrying`. A spent budget follows the tool's
    policy: `Failed`, or (ask) EffectUnknown so that a human is asked whether to try again."""
    while True:
        try:
            return host.gate.execute(
                tool=tool,
                binding=binding,
                arguments=call.arguments or {},
                decision=decision,
                ctx=host.tool_context(call),
                grant=grant,
            )
        except TransientFailure as failure:
            if (
                failure.call_retries > limits.tool_retries
                or failure.run_retries > limits.tool_retries_per_run
            ):
                spent = (
                    f"{tool.name} stayed unavailable after {failure.call_retries} tries "
                    f"(budget {limits.tool_retries} a call, {limits.tool_retries_per_run} a run): {failure.error}"
                )
                if tool.on_retries_exhausted == OnRetriesExhausted.ASK:
                    host.gate.escalate(binding)
                    raise EffectUnknown(spent) from failure
                return Failed(spent, kind=FailureKind.UNAVAILABLE, call_id=call.id)
            delay = limits.tool_retry_delay(failure.call_retries)
            if delay > limits.tool_retry_inline:
                return Retrying(call_id=call.id, delay=delay, error=failure.error)
            sleep(delay)


def _recheck(
    agent: Agent,
    host: Host,
    state: AgentState,
    call: CallState,
    decision: SignedDecision | None,
    changed: Drift,
) -> bool:
    """Check a call about to run against the definition now in force (agents/definition.py);
    True when it holds. A call whose tool is gone fails with an error the model reads; one
    that no longer holds goes back to a human with the reason, as a call whose policy asks
    again does (`_ask_instead`)."""
    assert isinstance(host, DefinitionHost)  # `drift` finds none on any other host
    verdict = recheck_call(agent, call, decision, device_required=host.gate.device_required)
    reason = verdict.reason
    if reason is None and decision is not None and changed.deciders_changed(call.name):
        reason = host.routed_elsewhere(call, decision)
    if (
        reason is None
        and decision is not None
        and served_elsewhere(agent.tool(call.name))
        and changed.served_definition_changed(call.name, call.asked_under)
    ):
        # The reviewer approved the call to the tool as its server then described it; an admin
        # accepting a new definition since is not that reviewer's consent to the new one. The
        # call is asked again under the definition now served, which its next decision answers.
        reason = f"the MCP server's definition of {call.name} changed since it was decided"
        call.asked_under = changed.served_parts(call.name)
    if reason is None:
        return True
    if verdict.gone:
        call.result = {"error": reason}
        call.status = CallStatus.INVALID
        host.call_gone(call, reason)
        _commit(host, state, [], settled_one=True)
        return False
    _send_back(host, state, call, f"The agent's definition changed since this call was decided: {reason}.")
    return False


def _arguments_fit(
    agent: Agent, host: Host, state: AgentState, call: CallState, decision: SignedDecision | None
) -> bool:
    """With no drift seen, the arguments about to run still fit the worker's schema of the tool
    (`arguments_misfit`: cheap, so checked every time); True when they do. The run's recorded
    definition may match the worker's while the call was checked under another: an edit a web
    process on the old release accepted (a rolling deploy), or a fingerprint written onto the
    run by a database writer. A call that does not fit goes back to a human with the reason."""
    tool = agent.tool(call.name)
    if tool is None or call.arguments is None:  # no drift: _prepare made it invalid; see below
        return True
    misfit = arguments_misfit(tool, call, decision)
    if misfit is None:
        return True
    _send_back(
        host,
        state,
        call,
        f"The arguments to run do not fit this worker's definition of {call.name}: {misfit}.",
    )
    return False


def _send_back(host: Host, state: AgentState, call: CallState, reason: str) -> None:
    """The call goes back to a human, whose next request carries `reason` (on a host that
    records the run's definition: `DefinitionHost.call_sent_back`)."""
    if isinstance(host, DefinitionHost):
        host.call_sent_back(call, reason)
    if call.status == CallStatus.UNKNOWN:  # a re-run: its reconciliation is asked again, as it was
        call.checkpoint_id = str(uuid.uuid4())
        _commit(host, state, [], [call], checkpoint_id=call.checkpoint_id)
    else:
        _ask_instead(host, state, call)


def _reconciled_result(host: Host, call: CallState, binding: CallBinding) -> bool:
    """Settle a reconciled call from the result the ledger holds, as the gate would (without
    the tool, which the gate needs and a changed definition removed); False when none is held."""
    entry = host.gate.ledger.entry(binding.idempotency_key)
    if entry is None or entry.status != LedgerStatus.CONFIRMED:
        return False
    call.result, call.status = entry.result, CallStatus.DONE
    return True


def _adopt_when_settled(host: Host, state: AgentState, changed: Drift | None) -> Drift | None:
    """Once no call of the batch is open, the run goes on under the worker's definition: it
    records it (later calls are checked against it) and its timeline says what changed. None
    from then on; `changed` while a call is still open (its request may predate the change)."""
    if changed is None or any(
        c.status in (CallStatus.READY, CallStatus.AWAITING, CallStatus.UNKNOWN) for c in state.batch
    ):
        return changed
    assert isinstance(host, DefinitionHost)
    host.definition_adopted(sha256=changed.sha256, digests=changed.digests, changes=changed.changes())
    return None


def _ask_instead(host: Host, state: AgentState, call: CallState) -> None:
    """The grant no longer allows this call (revoked, used up, expired, or refused by the
    gate), or its policy, asked again with the world as it is now, wants a human: it waits
    for one like any call its policy gates."""
    call.status, call.grant_id = CallStatus.AWAITING, None
    call.checkpoint_id = str(uuid.uuid4())
    state.waiting_since = state.waiting_since or _utcnow().isoformat()
    _commit(host, state, [], [call], checkpoint_id=call.checkpoint_id)


def _commit(
    host: Host,
    state: AgentState,
    new_messages: list[dict[str, Any]],
    raise_approvals: list[CallState] | None = None,
    *,
    checkpoint_id: str | None = None,
    settled_one: bool = False,
) -> None:
    """`settled_one`: a call of the batch settled. Once the whole batch has, `advance` commits next
    with the results as tool messages: one fenced transaction a batch fewer. A crash between runs
    nothing twice: the ledger holds an effect's result, and a rejection is read again."""
    if settled_one and not any(
        c.status in (CallStatus.READY, CallStatus.AWAITING, CallStatus.UNKNOWN) for c in state.batch
    ):
        return
    host.commit_step(
        checkpoint_id=checkpoint_id or str(uuid.uuid4()),
        state=state,
        new_messages=new_messages,
        raise_approvals=raise_approvals or [],
    )
