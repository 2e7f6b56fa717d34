"""Review Desk for the OpenAI Agents SDK (openai-agents 0.24, import name ``agents``).

The run pauses on the SDK's own ``needs_approval``. The paused ``RunState`` string stays in the
client's store (it never goes to the desk), and every interrupted call becomes a desk approval.
On resume the state is restored, each decided call is verified against the arguments read from
the *restored* state (the SDK does not authenticate a RunState), and the decision is applied
with ``RunState.approve`` or ``RunState.reject(rejection_message=...)``.

Function tools passed through :meth:`DeskGate.gated` re-verify at execution time: the wrapper
takes the verified decision from the store, checks the call about to run is the one the
reviewer saw, consumes the decision at the desk (single use, opens the ledger row), runs the
tool (with the reviewer's arguments for an edit, which the SDK cannot express itself) and
reports the outcome. Other tools (hosted, shell, computer, unwrapped) are offered approve and
reject only.

The SDK is imported inside the functions: its import name ``agents`` clashes with the desk's
own top-level package, so this module must be importable where the SDK is absent.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import hashlib
import json
import logging
from dataclasses import dataclass, field
from typing import Any

from reviewdesk_client import AsyncDeskClient, DeskError, VerificationError
from reviewdesk_client.canonical import args_sha256

log = logging.getLogger(__name__)

FRAMEWORK = "openai-agents"
EDIT_NOTICE = (
    "Note: a Review Desk reviewer edited this call before it ran. "
    "It ran with these arguments instead of yours: {arguments}\n"
)
REJECTED = "A Review Desk reviewer rejected this call: {reason}"
LAPSED = (
    "Review Desk: the approval for this call was {status} before a reviewer decided it; the call did not run."
)
REFUSED = "Review Desk refused to run this call: {why}"
CANNOT_EDIT = f"{FRAMEWORK} cannot edit this call (only wrapped function tools can run edits)."
LAPSED_STATUSES = ("expired", "cancelled")

# The external id of the gate run in progress. Tools run in tasks the SDK creates inside
# Runner.run, and those tasks copy this context, so the wrapper knows which run it serves
# without the agent being rebuilt per thread.
_running: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "reviewdesk_openai_agents_run", default=None
)


def external_id_for(thread_id: str) -> str:
    return f"oa:{thread_id}"


def thread_id_of(external_id: str) -> str:
    if not external_id.startswith("oa:"):
        raise ValueError(f"not an openai-agents external id: {external_id!r}")
    return external_id[3:]


def verified_key(external_id: str, tool_call_id: str) -> str:
    return f"{external_id}\x1f{tool_call_id}"


@dataclass
class GateResult:
    """What a gate run or resume came to."""

    thread_id: str
    status: str  # "paused" (calls wait for reviewers) or "finished"
    final_output: Any = None
    tickets: list = field(default_factory=list)  # the calls still waiting, as desk tickets
    refused: dict[str, str] = field(default_factory=dict)  # call id -> why a decision was refused
    result: Any = None  # the SDK's RunResult when the SDK ran


class DeskGate:
    """Sends an agent's approval interruptions to a Review Desk and applies its decisions."""

    def __init__(
        self,
        desk,
        *,
        agent_name: str | None = None,
        reviewers: list[str] | None = None,
        approval_ttl_seconds: int | None = None,
        context_items: int = 20,
    ):
        # an AsyncDeskClient's blocking client: the gate runs desk calls in threads itself
        self.desk = desk.desk if isinstance(desk, AsyncDeskClient) else desk
        self.agent_name = agent_name
        self.reviewers = reviewers
        self.approval_ttl_seconds = approval_ttl_seconds
        self.context_items = context_items

    # -- tools ---------------------------------------------------------------------------------

    def gated(self, tool):
        """The function tool, needing approval and re-verifying the decision before it acts."""
        from agents import FunctionTool

        if not isinstance(tool, FunctionTool):
            raise TypeError(f"only function tools can be wrapped, not {type(tool).__name__}")
        inner = tool.on_invoke_tool
        gate = self

        async def on_invoke_tool(ctx, args_json: str):
            return await gate._guarded_invoke(inner, ctx, args_json)

        on_invoke_tool.__reviewdesk_gate__ = self
        # never a callable policy: a call that skipped the approval would find no decision here
        return dataclasses.replace(tool, on_invoke_tool=on_invoke_tool, needs_approval=True)

    def _wraps(self, tool) -> bool:
        invoker = getattr(tool, "on_invoke_tool", None)
        return getattr(invoker, "__reviewdesk_gate__", None) is self

    async def _guarded_invoke(self, inner, ctx, args_json: str):
        # outside a gate run there is no external id, so no decision can be found
        external_id = _running.get() or ""
        verified = self.desk.store.take_verified(verified_key(external_id, ctx.tool_call_id))
        if verified is None:
            return REFUSED.format(why="no verified reviewer decision for this call")
        ticket = self.desk.store.ticket(external_id, ctx.tool_call_id)
        why = _not_the_reviewed_call(verified, ticket, ctx.tool_name, args_json)
        if why:
            return REFUSED.format(why=why)
        to_run = verified.arguments if verified.verdict == "edit" else _parsed(args_json)
        try:
            await _io(self.desk.guard, verified, to_run)  # the arguments about to run, then consume
        except (VerificationError, DeskError) as error:
            return REFUSED.format(why=f"the decision cannot be used ({error})")
        try:
            output = await inner(ctx, json.dumps(to_run))
        except Exception as error:
            await self._report_tool(verified, "failed", str(error))
            raise
        await self._report_tool(verified, "confirmed", _summary(output))
        if verified.verdict == "edit" and isinstance(output, str):
            return EDIT_NOTICE.format(arguments=json.dumps(to_run)) + output
        return output

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

    # -- runs ----------------------------------------------------------------------------------

    async def run(self, agent, thread_id: str, input, **runner_kwargs) -> GateResult:
        """Run the agent until it finishes or pauses for reviewers (then submit and return)."""
        external_id = external_id_for(thread_id)
        result = await self._run(agent, external_id, input, runner_kwargs)
        return await self._settle(agent, thread_id, result, input, runner_kwargs)

    async def resume(
        self, agent, thread_id: str, *, outcomes: dict | None = None, **runner_kwargs
    ) -> GateResult:
        """Apply the desk's decisions to the stored state and run on; undecided calls wait.

        ``outcomes`` maps call ids to outcomes already delivered (webhook, SSE); the others are
        asked of the desk. A decision that fails verification is refused: its call stays
        undecided and nothing runs for it.
        """
        from agents import RunState

        external_id = external_id_for(thread_id)
        blob = self.desk.store.get_state(external_id)
        if blob is None:
            raise LookupError(f"no stored run state for thread {thread_id!r}")
        state = await RunState.from_string(agent, blob)
        items = state.get_interruptions()
        if not items:
            return GateResult(thread_id, "finished")
        applied, rejected, refused = await self._apply(state, external_id, items, outcomes or {})
        if not applied:
            waiting = [self.desk.store.ticket(external_id, i.call_id) for i in items]
            return GateResult(thread_id, "paused", tickets=waiting, refused=refused)
        result = await self._run(agent, external_id, state, runner_kwargs)
        settled = await self._settle(agent, thread_id, result, None, runner_kwargs, rejected)
        settled.refused.update(refused)
        return settled

    async def _apply(self, state, external_id: str, items, outcomes: dict):
        """Approve or reject each decided interruption in ``state``; returns what was done."""
        applied, rejected, refused = 0, [], {}
        for item in items:
            ticket = self.desk.store.ticket(external_id, item.call_id)
            if ticket is None:
                continue
            outcome = outcomes.get(item.call_id) or await _io(self.desk.outcome, ticket)
            if outcome is None or outcome.status == "pending":
                continue
            if outcome.status in LAPSED_STATUSES:
                state.reject(item, rejection_message=LAPSED.format(status=outcome.status))
                applied += 1
                continue
            try:
                verified = self.desk.verify(outcome.decision, ticket, current_arguments=_arguments(item))
            except VerificationError as error:
                log.warning("refused the decision for %s: %s", item.call_id, error)
                refused[item.call_id] = str(error)
                continue
            if verified.verdict == "reject":
                state.reject(item, rejection_message=REJECTED.format(reason=verified.reason))
                rejected.append(verified)
            else:
                # never always_approve: it covers the tool for the rest of the run, whatever
                # the arguments, which is wider than any desk decision or grant
                self.desk.store.put_verified(verified_key(external_id, item.call_id), verified)
                state.approve(item)
            applied += 1
        return applied, rejected, refused

    async def _consume_rejects(self, rejected) -> None:
        # Consumed only once the resumed state is stored, so a crash before that replays the
        # reject instead of leaving its call stuck behind a consumed nonce.
        for verified in rejected:
            with contextlib.suppress(DeskError):
                await _io(self.desk.consume, verified)

    async def _run(self, agent, external_id: str, run_input, runner_kwargs):
        from agents import Runner

        token = _running.set(external_id)
        try:
            return await Runner.run(agent, run_input, **runner_kwargs)
        finally:
            _running.reset(token)

    async def _settle(self, agent, thread_id, result, input, runner_kwargs, rejected=()) -> GateResult:
        """Store the state; submit new interruptions, or report the end of the run."""
        external_id = external_id_for(thread_id)
        blob = result.to_state().to_string()
        self.desk.store.put_state(external_id, blob)
        await self._consume_rejects(rejected)  # before the run's end is reported
        if not result.interruptions:
            if self.desk.store.tickets(external_id):
                await self._report_run(external_id, _summary(result.final_output))
            return GateResult(thread_id, "finished", result.final_output, result=result)
        new = [i for i in result.interruptions if not self.desk.store.ticket(external_id, i.call_id)]
        if new:
            await self._submit(agent, external_id, blob, new, result, input)
        tickets = [self.desk.store.ticket(external_id, i.call_id) for i in result.interruptions]
        if any(t.status != "pending" for t in tickets if t is not None):
            return await self.resume(agent, thread_id, **runner_kwargs)  # a grant decided already
        return GateResult(thread_id, "paused", tickets=tickets, result=result)

    async def _submit(self, agent, external_id, blob: str, items, result, input) -> None:
        calls = [self._call(item) for item in items]
        names = ", ".join(sorted({item.tool_name for item in items}))
        await _io(
            self.desk.submit,
            external_id=external_id,
            framework=FRAMEWORK,
            agent=self.agent_name or agent.name,
            checkpoint=hashlib.sha256(blob.encode()).hexdigest(),
            calls=calls,
            title=f"{agent.name}: {names}",
            input=input if isinstance(input, str) else "",
            context=_context(result.to_input_list()[-self.context_items :]),
            reviewers=self.reviewers,
            approval_ttl_seconds=self.approval_ttl_seconds,
        )

    def _call(self, item):
        tool = next(
            (t for t in getattr(item.agent, "tools", ()) if getattr(t, "name", None) == item.tool_name),
            None,
        )
        arguments = _arguments(item)
        if tool is not None and self._wraps(tool):
            return self.desk.call(
                item.call_id,
                item.tool_name,
                arguments,
                schema=tool.params_json_schema,
                verdicts=("approve", "reject", "edit"),
                description=tool.description or "",
            )
        return self.desk.call(
            item.call_id,
            item.tool_name,
            arguments,
            verdicts=("approve", "reject"),
            description=CANNOT_EDIT,
        )


def resumer_handler(build_agent, **gate_kwargs):
    """A handler for ``python -m reviewdesk_client.resumer --handler pkg.mod:name``.

    ``build_agent(gate)`` builds the agent as the paused process did, its gated tools wrapped
    with ``gate.gated``. Settled approvals of other frameworks are left alone.
    """

    def handle(desk, ticket, outcome) -> GateResult | None:
        if not ticket.external_id.startswith("oa:"):
            return None
        gate = DeskGate(desk, **gate_kwargs)
        thread_id = thread_id_of(ticket.external_id)
        outcomes = {ticket.tool_call_id: outcome}
        return asyncio.run(gate.resume(build_agent(gate), thread_id, outcomes=outcomes))

    return handle


def _not_the_reviewed_call(verified, ticket, tool_name: str, args_json: str) -> str:
    """Why the call about to run is not the one the reviewer saw ("" if it is)."""
    if ticket is None or verified.approval_id != ticket.approval_id:
        return "the decision is not for this call"
    if ticket.tool != tool_name:
        return "the decision is for another tool"
    try:
        model_arguments = _parsed(args_json)
    except ValueError:
        return "the call's arguments are not JSON"
    if args_sha256(model_arguments) != ticket.arguments_sha256:
        return "the call's arguments are not the ones the reviewer saw"
    return ""


async def _io(function, *args, **kwargs):
    """A blocking desk call, in a thread: the framework's event loop is never held by the desk."""
    return await asyncio.to_thread(function, *args, **kwargs)


def _parsed(text: str | None):
    value = json.loads(text or "{}")
    return value if isinstance(value, dict) else {"input": value}


def _arguments(item) -> dict:
    """The call's arguments as the restored state holds them (what the hash is checked on)."""
    try:
        return _parsed(item.arguments)
    except ValueError:
        return {"input": item.arguments}


def _summary(value) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text[:500]


def _context(items) -> list[dict]:
    """The run's recent items as desk context messages (untrusted, shown as such)."""
    messages = []
    names: dict[str, str] = {}  # call id -> the tool it called: the desk says whose output a value came from
    for item in items:
        kind = item.get("type")
        if kind == "function_call":
            names[str(item.get("call_id"))] = str(item.get("name"))
            messages.append({"role": "assistant", "content": f"{item.get('name')}({item.get('arguments')})"})
        elif kind == "function_call_output":
            message = {"role": "tool", "content": _text(item.get("output"))}
            call_id = str(item.get("call_id"))
            if call_id in names:
                message.update(name=names[call_id], tool_call_id=call_id)
            messages.append(message)
        elif item.get("role") in ("user", "assistant", "system"):
            messages.append({"role": item["role"], "content": _text(item.get("content"))})
    return messages


def _text(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return "" if content is None else str(content)
