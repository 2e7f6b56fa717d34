"""Review Desk for Pydantic AI (pydantic-ai-slim 2.68).

The run pauses the Pydantic AI way: tools declared with ``requires_approval=True`` (or raising
``ApprovalRequired``) end the run with a ``DeferredToolRequests`` output. The message history is
kept in the client's store (never sent to the desk) and each approval call becomes a desk
approval, submitted with ``resume_policy="all_or_nothing"``: Pydantic AI needs every deferred
call of a turn answered at once, so nothing resumes until all of them are decided.

On resume every decision is verified against the arguments in the *restored* history, then
mapped natively: approve is ``ToolApproved()``, edit is ``ToolApproved(override_args=...)``,
reject is ``ToolDenied(reason)``, and an expired or cancelled approval is a ``ToolDenied`` that
says so. A capability (:meth:`DeskGate.capability`, added to every gate run) re-checks in
``before_tool_execute`` that the call about to run carries a verified decision for exactly these
arguments, consumes it at the desk (single use, opens the ledger row) and reports the outcome.

The SDK is imported inside the functions, so this module imports where the SDK is absent.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import hashlib
import json
import logging
from dataclasses import dataclass, field
from typing import Any

from reviewdesk_client import AsyncDeskClient, DeskError, VerificationError

log = logging.getLogger(__name__)

FRAMEWORK = "pydantic-ai"
EDIT_NOTICE = (
    "Note: a Review Desk reviewer edited this call before it ran. "
    "It ran with these arguments instead of yours: {arguments}\n"
)
REJECTED = "A Review Desk reviewer rejected this call: {reason}"
LAPSED = (
    "Review Desk: the approval for this call was {status} before a reviewer decided it; the call did not run."
)
REFUSED = "Review Desk refused to run this call: {why}"
LAPSED_STATUSES = ("expired", "cancelled")
# What resume sets itself; a caller's own run arguments (deps, usage limits, ...) pass through.
RESUME_KWARGS = ("message_history", "deferred_tool_results")

# The external id of the gate run in progress; the guard capability reads it to find the
# verified decision of the call it is about to let through.
_running: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "reviewdesk_pydantic_ai_run", default=None
)


def external_id_for(conversation_id: str) -> str:
    return f"pa:{conversation_id}"


def conversation_id_of(external_id: str) -> str:
    if not external_id.startswith("pa:"):
        raise ValueError(f"not a pydantic-ai external id: {external_id!r}")
    return external_id[3:]


def verified_key(external_id: str, tool_call_id: str) -> str:
    return f"{external_id}\x1f{tool_call_id}"


@dataclass
class GateResult:
    """What a gate run or resume came to."""

    conversation_id: str
    status: str  # "paused" (calls wait for reviewers) or "finished"
    output: Any = None
    tickets: list = field(default_factory=list)  # this turn's calls, as desk tickets
    refused: dict[str, str] = field(default_factory=dict)  # call id -> why a decision was refused
    result: Any = None  # the SDK's AgentRunResult when the SDK ran


class UnsupportedDeferral(Exception):
    """The run deferred calls the desk does not answer (external or question calls)."""


class DeskGate:
    """Sends a Pydantic AI agent's approval requests to a Review Desk and applies its decisions."""

    def __init__(
        self,
        desk,
        *,
        agent_name: str | None = None,
        reviewers: list[str] | None = None,
        approval_ttl_seconds: int | None = None,
        context_messages: int = 20,
    ):
        # an AsyncDeskClient's blocking client: the gate runs desk calls in threads itself
        self.desk = desk.desk if isinstance(desk, AsyncDeskClient) else desk
        self.agent_name = agent_name
        self.reviewers = reviewers
        self.approval_ttl_seconds = approval_ttl_seconds
        self.context_messages = context_messages
        self._schemas: dict[str, dict] = {}
        self._in_flight: dict[str, Any] = {}
        self._guard = _guard_type()(self)

    def capability(self):
        """The guard capability; every gate run adds it, so an agent needs no change for it."""
        return self._guard

    # -- runs ----------------------------------------------------------------------------------

    async def run(self, agent, conversation_id: str, prompt, **run_kwargs) -> GateResult:
        """Run the agent until it finishes or defers approvals (then submit them and return)."""
        external_id = external_id_for(conversation_id)
        result = await self._run(agent, external_id, prompt, run_kwargs)
        return await self._settle(agent, conversation_id, result, prompt, run_kwargs)

    async def resume(
        self, agent, conversation_id: str, *, outcomes: dict | None = None, **run_kwargs
    ) -> GateResult:
        """Resume once every call of the paused turn is decided; until then, nothing runs.

        ``outcomes`` maps call ids to outcomes already delivered; the others are asked of the
        desk. A decision that fails verification is refused and holds the whole turn.
        """
        from pydantic_ai.messages import ModelMessagesTypeAdapter
        from pydantic_ai.tools import DeferredToolResults

        external_id = external_id_for(conversation_id)
        stored = self.desk.store.get_state(external_id)
        if stored is None:
            raise LookupError(f"no stored history for conversation {conversation_id!r}")
        envelope = json.loads(stored)
        if not envelope["pending"]:
            return GateResult(conversation_id, "finished")
        history = ModelMessagesTypeAdapter.validate_json(envelope["history"])
        answers = await self._answers(external_id, history, envelope["pending"], outcomes or {})
        if answers.waiting or answers.refused:
            return GateResult(conversation_id, "paused", tickets=answers.tickets, refused=answers.refused)
        for call_id, verified in answers.verified.items():
            self.desk.store.put_verified(verified_key(external_id, call_id), verified)
        results = DeferredToolResults(
            approvals=answers.approvals, metadata=answers.metadata, answered_by=answers.answered_by
        )
        run_kwargs.update(message_history=history, deferred_tool_results=results)
        result = await self._run(agent, external_id, None, run_kwargs)
        settled = await self._settle(agent, conversation_id, result, None, run_kwargs, answers.rejected)
        return settled

    async def _answers(self, external_id: str, history, pending: list[str], outcomes: dict) -> _Answers:
        """Each pending call's answer, or why the turn cannot resume yet."""
        from pydantic_ai.tools import ToolApproved, ToolDenied

        parts = _last_tool_calls(history)
        answers = _Answers()
        for call_id in pending:
            ticket = self.desk.store.ticket(external_id, call_id)
            answers.tickets.append(ticket)
            part = parts.get(call_id)
            if ticket is None or part is None:
                answers.refused[call_id] = "the stored history and tickets disagree on this call"
                continue
            outcome = outcomes.get(call_id) or await _io(self.desk.outcome, ticket)
            if outcome is None or outcome.status == "pending":
                answers.waiting.append(ticket)
                continue
            if outcome.status in LAPSED_STATUSES:
                answers.approvals[call_id] = ToolDenied(LAPSED.format(status=outcome.status))
                continue
            try:
                verified = self.desk.verify(outcome.decision, ticket, current_arguments=part.args_as_dict())
            except VerificationError as error:
                log.warning("refused the decision for %s: %s", call_id, error)
                answers.refused[call_id] = str(error)
                continue
            answers.answered_by[call_id] = verified.reviewer
            answers.metadata[call_id] = {
                "review_desk": {"approval_id": verified.approval_id, "reviewer": verified.reviewer}
            }
            if verified.verdict == "reject":
                answers.approvals[call_id] = ToolDenied(REJECTED.format(reason=verified.reason))
                answers.rejected.append(verified)
            else:
                override = verified.arguments if verified.verdict == "edit" else None
                answers.approvals[call_id] = ToolApproved(override_args=override)
                answers.verified[call_id] = verified
        return answers

    async def _consume_rejects(self, rejected) -> None:
        # Consumed only once the resumed history is stored, so a crash before that replays the
        # reject instead of leaving the turn stuck behind a consumed nonce.
        for verified in rejected:
            with contextlib.suppress(DeskError):
                await _io(self.desk.consume, verified)

    async def _run(self, agent, external_id: str, prompt, run_kwargs):
        run_kwargs = dict(run_kwargs)
        capabilities = [*run_kwargs.pop("capabilities", ()), self._guard]
        token = _running.set(external_id)
        try:
            return await agent.run(prompt, capabilities=capabilities, **run_kwargs)
        finally:
            _running.reset(token)

    async def _settle(
        self, agent, conversation_id: str, result, prompt, run_kwargs, rejected=()
    ) -> GateResult:
        """Store the history; submit the deferred approvals, or report the end of the run."""
        from pydantic_ai.messages import ModelMessagesTypeAdapter
        from pydantic_ai.tools import DeferredToolRequests

        external_id = external_id_for(conversation_id)
        messages = result.all_messages()
        history = ModelMessagesTypeAdapter.dump_json(messages).decode()
        output = result.output
        deferred = isinstance(output, DeferredToolRequests)
        pending = [call.tool_call_id for call in output.approvals] if deferred else []
        self.desk.store.put_state(external_id, json.dumps({"history": history, "pending": pending}))
        await self._consume_rejects(rejected)  # before the run's end is reported
        if not deferred:
            if self.desk.store.tickets(external_id):
                await self._report_run(external_id, _summary(output))
            return GateResult(conversation_id, "finished", output, result=result)
        if output.calls:
            raise UnsupportedDeferral(
                "the run deferred external or question calls; the Review Desk gate answers approvals only"
            )
        new = [c for c in output.approvals if not self.desk.store.ticket(external_id, c.tool_call_id)]
        if new:
            await self._submit(agent, external_id, history, new, messages, prompt)
        tickets = [self.desk.store.ticket(external_id, call_id) for call_id in pending]
        if all(t is not None and t.status != "pending" for t in tickets):  # grants decided them all
            turn_kwargs = {k: v for k, v in run_kwargs.items() if k not in RESUME_KWARGS}
            return await self.resume(agent, conversation_id, **turn_kwargs)
        return GateResult(conversation_id, "paused", output, tickets=tickets, result=result)

    async def _submit(self, agent, external_id: str, history: str, calls, messages, prompt) -> None:
        reason = _model_words(messages)
        await _io(
            self.desk.submit,
            external_id=external_id,
            framework=FRAMEWORK,
            agent=self.agent_name or agent.name or "agent",
            checkpoint=hashlib.sha256(history.encode()).hexdigest(),
            calls=[self._call(call, reason) for call in calls],
            title=f"{agent.name or 'agent'}: {', '.join(sorted({c.tool_name for c in calls}))}",
            input=prompt if isinstance(prompt, str) else "",
            context=_context(messages[-self.context_messages :]),
            resume_policy="all_or_nothing",
            reviewers=self.reviewers,
            approval_ttl_seconds=self.approval_ttl_seconds,
        )

    def _call(self, call, reason: str):
        schema = self._schemas.get(call.tool_name)
        verdicts = ("approve", "reject", "edit") if schema else ("approve", "reject")
        return self.desk.call(
            call.tool_call_id,
            call.tool_name,
            call.args_as_dict(),
            schema=schema,
            verdicts=verdicts,
            reason=reason,
        )

    # -- the guard's checks (called by the capability) -----------------------------------------

    async def _admit(self, call) -> None:
        """Consume the verified decision for ``call``, or raise ToolFailed: it must not run."""
        from pydantic_ai.exceptions import ToolFailed

        # outside a gate run there is no external id, so no decision can be found
        external_id = _running.get() or ""
        key = verified_key(external_id, call.tool_call_id)
        verified = self.desk.store.take_verified(key)
        if verified is None:
            raise ToolFailed(REFUSED.format(why="no verified reviewer decision for this call"))
        ticket = self.desk.store.ticket(external_id, call.tool_call_id)
        if ticket is None or ticket.approval_id != verified.approval_id or ticket.tool != call.tool_name:
            raise ToolFailed(REFUSED.format(why="the decision is not for this call"))
        try:
            # call.args already holds override_args for an edit: the arguments that will run
            await _io(self.desk.guard, verified, call.args_as_dict())
        except (VerificationError, DeskError) as error:
            raise ToolFailed(REFUSED.format(why=f"the decision cannot be used ({error})")) from None
        self._in_flight[key] = verified

    async def _finished(self, call, result):
        verified = self._in_flight.pop(verified_key(_running.get() or "", call.tool_call_id), None)
        if verified is None:
            return result
        await self._report_tool(verified, "confirmed", _summary(result))
        if verified.verdict == "edit" and isinstance(result, str):
            return EDIT_NOTICE.format(arguments=json.dumps(verified.arguments)) + result
        return result

    async def _failed(self, call, error: Exception) -> None:
        verified = self._in_flight.pop(verified_key(_running.get() or "", call.tool_call_id), None)
        if verified is not None:
            await self._report_tool(verified, "failed", str(error))

    async def _report_run(self, external_id: str, output: str) -> None:
        # The framework's run is over either way; a desk run that already ended (cancelled
        # while the framework finished its turn) keeps its status.
        try:
            await _io(self.desk.report_run, external_id, "succeeded", output=output)
        except DeskError:
            log.warning("could not report the end of %s", external_id, exc_info=True)

    async def _report_tool(self, verified, status: str, summary: str) -> None:
        # The tool already ran: a lost report leaves the ledger row pending, which the desk
        # turns into "unknown" for a human; failing the run here would hide the effect.
        try:
            await _io(self.desk.report_tool, verified, status, summary=summary[:500])
        except Exception:
            log.warning("could not report %s for %s", status, verified.tool_call_id, exc_info=True)


def resumer_handler(build_agent, **gate_kwargs):
    """A handler for ``python -m reviewdesk_client.resumer --handler pkg.mod:name``.

    ``build_agent(gate)`` builds the agent as the paused process did. Each settled call of a
    turn comes through here; the turn resumes once, with the last of them.
    """

    def handle(desk, ticket, outcome) -> GateResult | None:
        if not ticket.external_id.startswith("pa:"):
            return None
        gate = DeskGate(desk, **gate_kwargs)
        conversation_id = conversation_id_of(ticket.external_id)
        outcomes = {ticket.tool_call_id: outcome}
        return asyncio.run(gate.resume(build_agent(gate), conversation_id, outcomes=outcomes))

    return handle


@dataclass
class _Answers:
    approvals: dict = field(default_factory=dict)
    metadata: dict = field(default_factory=dict)
    answered_by: dict = field(default_factory=dict)
    verified: dict = field(default_factory=dict)
    rejected: list = field(default_factory=list)
    waiting: list = field(default_factory=list)
    refused: dict = field(default_factory=dict)
    tickets: list = field(default_factory=list)


@functools.cache
def _guard_type():
    """The guard capability class, built on first use so the SDK is imported lazily."""
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.capabilities.abstract import CapabilityOrdering

    class ReviewDeskGuard(AbstractCapability):
        """Lets a gated call run only with a verified, unconsumed desk decision for its args."""

        def __init__(self, gate: DeskGate):
            self.gate = gate

        def get_ordering(self):
            # innermost: no other capability's before_tool_execute runs after this check
            return CapabilityOrdering(position="innermost")

        async def prepare_tools(self, ctx, tool_defs):
            for tool_def in tool_defs:
                self.gate._schemas[tool_def.name] = tool_def.parameters_json_schema
            return tool_defs

        async def before_tool_execute(self, ctx, *, call, tool_def, args):
            if tool_def.kind == "unapproved" or ctx.tool_call_approved:
                await self.gate._admit(call)
            return args

        async def after_tool_execute(self, ctx, *, call, tool_def, args, result):
            return await self.gate._finished(call, result)

        async def on_tool_execute_error(self, ctx, *, call, tool_def, args, error):
            await self.gate._failed(call, error)
            raise error

    return ReviewDeskGuard


async def _io(function, *args, **kwargs):
    """A blocking desk call, in a thread: the framework's event loop is never held by the desk."""
    return await asyncio.to_thread(function, *args, **kwargs)


def _last_tool_calls(history) -> dict:
    from pydantic_ai.messages import ModelResponse, ToolCallPart

    responses = [m for m in history if isinstance(m, ModelResponse)]
    if not responses:
        return {}
    return {p.tool_call_id: p for p in responses[-1].parts if isinstance(p, ToolCallPart)}


def _model_words(messages) -> str:
    """The text the model wrote beside its calls (untrusted; the desk shows it as such)."""
    from pydantic_ai.messages import ModelResponse, TextPart

    responses = [m for m in messages if isinstance(m, ModelResponse)]
    if not responses:
        return ""
    return " ".join(p.content for p in responses[-1].parts if isinstance(p, TextPart))[:2000]


def _context(messages) -> list[dict]:
    from pydantic_ai.messages import (
        ModelRequest,
        SystemPromptPart,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )

    roles = {UserPromptPart: "user", SystemPromptPart: "system", ToolReturnPart: "tool"}
    out = []
    for message in messages:
        for part in message.parts:
            if isinstance(message, ModelRequest):
                role = roles.get(type(part))
                if role == "tool":  # named: the desk says whose output a value came from
                    out.append(
                        {
                            "role": role,
                            "content": _summary(part.content),
                            "name": part.tool_name,
                            "tool_call_id": part.tool_call_id,
                        }
                    )
                elif role:
                    out.append({"role": role, "content": _summary(part.content)})
            elif isinstance(part, TextPart):
                out.append({"role": "assistant", "content": part.content})
            elif isinstance(part, ToolCallPart):
                out.append({"role": "assistant", "content": f"{part.tool_name}({part.args_as_json_str()})"})
    return out


def _summary(value) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text[:500]
