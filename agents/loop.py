"""The turn loop: state + provider + tools → outcome.

`advance` moves a run as far as it can go without a human: it calls the
model, runs the calls that need no approval, raises approvals for the rest and
returns `Waiting`; called again after decisions land, it runs the approved
calls (through the gate), feeds rejections back to the model and carries on.
Every step is committed through the host before the next one starts, so a
crash resumes from the last committed step.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from agents.canonical import canonical_json
from agents.gate import ApprovalGate, CallBinding, DecisionRefused, EffectUnknown, SignedDecision
from agents.providers import AssistantTurn, ModelProvider, ProviderError, ToolCall
from agents.registry import Agent
from agents.state import AgentState, CallState, CallStatus, Step
from agents.tools import ToolContext


@dataclass(frozen=True)
class Limits:
    max_model_calls: int = 50
    # Garbage tool calls become error results the model can correct, up to this many a run.
    max_invalid_calls: int = 10
    # A run resumed after waiting longer than this tells the model how long it waited.
    wait_notice_after: timedelta = timedelta(minutes=5)


def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Rejected:
    reason: str


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
class Failed:
    error: str
    kind: str  # transient | model | tool | approval | internal
    call_id: str | None = None


Outcome = Finished | Waiting | Failed


class Host(Protocol):
    """What the loop needs from whoever runs it (the desk implements it on the database)."""

    run_id: str
    run_input: str
    gate: ApprovalGate

    def load(self) -> AgentState | None: ...

    def messages(self, count: int) -> list[dict[str, Any]]: ...

    def commit_step(
        self,
        *,
        checkpoint_id: str,
        state: AgentState,
        new_messages: list[dict[str, Any]],
        raise_approvals: list[CallState],
    ) -> None:
        """Atomically: append messages, save the checkpoint, raise approvals for these calls."""
        ...

    def decision_for(self, call: CallState) -> DecisionState: ...

    def reviewer_notes(self, call_ids: list[str]) -> list[str]:
        """Reviewers' notes on these calls' decisions, to steer the next model call."""
        ...

    def tool_context(self, call: CallState) -> ToolContext: ...


def advance(
    *,
    agent: Agent,
    provider: ModelProvider,
    host: Host,
    limits: Limits = Limits(),
    now: Callable[[], datetime] = _utcnow,
) -> Outcome:
    state = host.load()
    if state is None:
        state = AgentState(step=Step.MODEL, message_count=2)
        first = [
            {"role": "system", "content": agent.system_prompt},
            {"role": "user", "content": host.run_input},
        ]
        _commit(host, state, first)

    while True:
        if state.step == Step.DONE:
            return Finished(state.output)
        if state.step == Step.MODEL:
            if state.model_calls >= limits.max_model_calls:
                return Failed(f"stopped after {limits.max_model_calls} model calls", kind="model")
            try:
                turn = provider.complete(host.messages(state.message_count), agent.tool_specs())
            except ProviderError as exc:
                return Failed(str(exc), kind="transient" if exc.transient else "model")
            turn = _with_run_unique_ids(turn, state.model_calls, getattr(host, "call_id_prefix", "call"))
            state.model_calls += 1
            state.message_count += 1
            if not turn.tool_calls:
                state.step, state.output = Step.DONE, turn.content
                _commit(host, state, [turn.as_message()])
                continue
            state.step = Step.TOOLS
            state.batch = [_prepare(agent, call) for call in turn.tool_calls]
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
                    kind="model",
                )
            continue

        outcome = _settle_batch(agent, host, state)
        if outcome is not None:
            return outcome
        call_ids = [call.id for call in state.batch]
        # Tool results first: each assistant tool call gets exactly one, right after it.
        new_messages = [
            {"role": "tool", "tool_call_id": call.id, "content": json.dumps(call.result)}
            for call in state.batch
        ]
        new_messages += [{"role": "user", "content": note} for note in host.reviewer_notes(call_ids)]
        notice = _wait_notice(state, now(), limits)
        if notice:
            new_messages.append({"role": "user", "content": notice})
        state.message_count += len(new_messages)
        state.batch, state.step, state.waiting_since = [], Step.MODEL, None
        _commit(host, state, new_messages)


def _wait_notice(state: AgentState, now: datetime, limits: Limits) -> str | None:
    if not state.waiting_since:
        return None
    waited = now - datetime.fromisoformat(state.waiting_since)
    if waited < limits.wait_notice_after:
        return None
    return (
        f"[Review Desk] This run waited {_duration(waited)} for human review before resuming. "
        "Facts you looked up before the wait may have changed; check them again before relying on them."
    )


def _duration(delta: timedelta) -> str:
    minutes = int(delta.total_seconds() // 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    parts = [f"{days} d"] * bool(days) + [f"{hours} h"] * bool(hours) + [f"{minutes} min"]
    return " ".join(parts)


def _settle_batch(agent: Agent, host: Host, state: AgentState) -> Outcome | None:
    """Run what can run now; None when every call of the batch has its result."""
    for call in state.batch:
        if call.status == CallStatus.READY:
            decision = None
        elif call.status in (CallStatus.AWAITING, CallStatus.UNKNOWN):
            decision = host.decision_for(call)
            if decision is None:
                continue
            if isinstance(decision, Rejected):
                call.result = {"error": _rejection(call, decision.reason)}
                call.status = CallStatus.REJECTED
                _commit(host, state, [])
                continue
            if isinstance(decision, Reconciled):
                decision = None  # the ledger now holds the result the reviewer confirmed
        else:
            continue
        binding = CallBinding(
            run_id=host.run_id,
            checkpoint_id=call.checkpoint_id,
            tool_call_id=call.id,
            tool=call.name,
        )
        try:
            call.result = host.gate.execute(
                tool=agent.tool(call.name),
                binding=binding,
                arguments=call.arguments,
                decision=decision,
                ctx=host.tool_context(call),
            )
        except DecisionRefused as exc:
            return Failed(f"decision refused: {exc.reason}", kind="approval", call_id=call.id)
        except EffectUnknown:
            # Never run again blindly: ask a human whether it happened.
            call.status = CallStatus.UNKNOWN
            call.checkpoint_id = str(uuid.uuid4())
            _commit(host, state, [], [call], checkpoint_id=call.checkpoint_id)
            continue
        call.status = CallStatus.DONE
        _commit(host, state, [])
    waiting = [c for c in state.batch if c.status in (CallStatus.AWAITING, CallStatus.UNKNOWN)]
    if waiting:
        return Waiting(tuple(call.id for call in waiting))
    return None


def _rejection(call: CallState, reason: str) -> str:
    if call.status == CallStatus.UNKNOWN:
        return (
            "This call was interrupted and it is unknown whether it took effect; "
            f"a reviewer chose not to run it again: {reason}"
        )
    return f"A reviewer rejected this call: {reason}"


def _with_run_unique_ids(turn: AssistantTurn, model_call: int, prefix: str) -> AssistantTurn:
    """Give each call an id of our own, unique in the run: the ledger and approvals are keyed
    on it, and some OpenAI-compatible servers omit or reuse ids across turns."""
    calls = tuple(
        ToolCall(id=f"{prefix}_{model_call}_{n}", name=call.name, arguments=call.arguments)
        for n, call in enumerate(turn.tool_calls)
    )
    return AssistantTurn(content=turn.content, tool_calls=calls)


def _prepare(agent: Agent, call: ToolCall) -> CallState:
    """Check a model's tool call; garbage becomes an error result, never an approval."""
    tool = agent.tool(call.name)
    if tool is None:
        return _invalid(call, None, f"unknown tool {call.name!r}")
    try:
        arguments = json.loads(call.arguments or "{}")
    except json.JSONDecodeError as exc:
        return _invalid(call, None, f"arguments are not valid JSON: {exc}")
    try:
        canonical_json(arguments)  # approvals hash and sign exactly these bytes
    except ValueError as exc:  # 1e400 (inf), integers beyond 2**53, lone surrogates
        return _invalid(call, None, f"arguments are not representable as canonical JSON (RFC 8785): {exc}")
    errors = tool.validation_errors(arguments)
    if errors:
        return _invalid(call, arguments, "invalid arguments: " + "; ".join(errors))
    status = CallStatus.AWAITING if tool.needs_approval(arguments) else CallStatus.READY
    return CallState(id=call.id, name=call.name, arguments=arguments, status=status)


def _invalid(call: ToolCall, arguments: Any, error: str) -> CallState:
    return CallState(
        id=call.id,
        name=call.name,
        arguments=arguments if isinstance(arguments, dict) else None,
        status=CallStatus.INVALID,
        result={"error": error},
    )


def _commit(
    host: Host,
    state: AgentState,
    new_messages: list[dict[str, Any]],
    raise_approvals: list[CallState] | None = None,
    *,
    checkpoint_id: str | None = None,
) -> None:
    host.commit_step(
        checkpoint_id=checkpoint_id or str(uuid.uuid4()),
        state=state,
        new_messages=new_messages,
        raise_approvals=raise_approvals or [],
    )
