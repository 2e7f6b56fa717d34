"""LangGraph / LangChain adapter: `HumanInTheLoopMiddleware` per call, decided on Review Desk.

The pause is LangChain's own (`interrupt_mode="per_call"`, one interrupt per gated call),
kept in the graph's checkpointer, so no process waits while a reviewer thinks. A resume
verifies each desk decision locally and answers the interrupt by its id; `DeskGuard`, listed
after the HITL middleware, sees the call exactly as it will run and refuses it unless a
verified decision for those arguments is on hand, which it consumes at the desk first.

    gate = LangGraphDesk(desk, interrupt_on={"refund": ["approve", "edit", "reject"]},
                         tools=[refund], agent="support-bot")
    graph = gate.create_agent(model, checkpointer=SqliteSaver(conn))
    gate.invoke(graph, {"messages": [...]}, thread_id="t-42")   # pauses, submits
    gate.resume(graph, "t-42")                                   # later, any process

LangChain and LangGraph are imported lazily, inside the functions that need them.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from reviewdesk_client import AlreadyConsumed, DecisionExpired, DeskError, VerificationError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from reviewdesk_client import DeskClient, Ticket, Verified

log = logging.getLogger(__name__)

FRAMEWORK = "langgraph"
DESK_VERDICTS = ("approve", "reject", "edit")
CONTEXT_MESSAGES = 20
_ROLES = {"human": "user", "ai": "assistant", "tool": "tool", "system": "system"}


class UnsupportedInterrupt(ValueError):
    """An interrupt this adapter cannot put on the desk (batched HITL, or not HITL at all)."""


@dataclass
class ResumeResult:
    """What one `LangGraphDesk.resume` pass did to a thread's pending interrupts."""

    answered: dict[str, str] = field(default_factory=dict)  # tool_call_id -> verdict
    refused: dict[str, str] = field(default_factory=dict)  # tool_call_id -> why
    pending: list[str] = field(default_factory=list)  # tool_call_ids still awaiting a reviewer
    output: Any = None  # the GraphOutput of the resumed invoke, if there was one
    submitted: list[Ticket] = field(default_factory=list)  # calls the resumed run paused on


def external_id_for(thread_id: str) -> str:
    return f"lg:{thread_id}"


def verified_key(thread_id: str, tool_call_id: str) -> str:
    return f"lg:{thread_id}:{tool_call_id}"


class LangGraphDesk:
    """Desk gating for one agent definition: builds its middleware, submits, resumes."""

    def __init__(
        self,
        desk: DeskClient,
        interrupt_on: dict[str, Sequence[str] | dict[str, Any]],
        *,
        tools: Iterable[Any] = (),
        agent: str = "langgraph-agent",
        reviewers: list[str] | None = None,
        approval_ttl_seconds: int | None = None,
    ) -> None:
        self.desk = desk
        self.agent = agent
        self.reviewers = reviewers
        self.approval_ttl_seconds = approval_ttl_seconds
        self.tools = list(tools)
        self.interrupt_on = {name: _interrupt_config(name, c) for name, c in interrupt_on.items()}

    # -- building the agent -------------------------------------------------------------

    def middleware(self) -> list[Any]:
        """HITL per call, then the guard: later middleware runs inside, after the review."""
        from langchain.agents.middleware import HumanInTheLoopMiddleware

        hitl = HumanInTheLoopMiddleware(interrupt_on=self.interrupt_on, interrupt_mode="per_call")
        return [hitl, _guard_class()(self.desk, self.interrupt_on)]

    def create_agent(
        self, model: Any, *, checkpointer: Any, middleware: Sequence[Any] = (), **kwargs: Any
    ) -> Any:
        """`langchain.agents.create_agent` with the desk's middleware first in the chain."""
        from langchain.agents import create_agent

        if checkpointer is None:
            raise ValueError("a durable checkpointer is needed: the pause outlives the process")
        return create_agent(
            model,
            tools=self.tools,
            checkpointer=checkpointer,
            middleware=[*self.middleware(), *middleware],
            name=self.agent,
            **kwargs,
        )

    # -- running ------------------------------------------------------------------------

    def invoke(self, graph: Any, graph_input: Any, *, thread_id: str, **config: Any) -> Any:
        """Run the graph; if it pauses on gated calls, put them on the desk before returning."""
        cfg = _config(thread_id, config)
        out = graph.invoke(graph_input, cfg, version="v2")
        submitted = self._after_invoke(graph, cfg, out)
        # A call a standing grant covers comes back approved: run on at once, as the desk's own
        # runs do, for as long as each pause is settled already.
        while _any_settled(submitted):
            result = self.resume(graph, thread_id, **config)
            if result.output is None:
                break
            out, submitted = result.output, result.submitted
        return out

    async def ainvoke(self, graph: Any, graph_input: Any, *, thread_id: str, **config: Any) -> Any:
        """`invoke` for graphs driven asynchronously: desk I/O runs in a worker thread."""
        cfg = _config(thread_id, config)
        out = await graph.ainvoke(graph_input, cfg, version="v2")
        submitted = await asyncio.to_thread(self._after_invoke, graph, cfg, out)
        while _any_settled(submitted):
            result = await self.aresume(graph, thread_id)
            if result.output is None:
                break
            out, submitted = result.output, result.submitted
        return out

    def submit_pending(
        self, graph: Any, thread_id: str, interrupts: Sequence[Any] | None = None
    ) -> list[Ticket]:
        """Submit the thread's pending HITL calls (idempotent at the desk per call id)."""
        cfg = _config(thread_id, {})
        snapshot = graph.get_state(cfg)
        pending = list(snapshot.interrupts if interrupts is None else interrupts)
        external_id = external_id_for(thread_id)
        # A call with a ticket is on the desk already (tickets are stored before submit returns).
        requests = [
            r
            for r in map(_approval_request, pending)
            if not self.desk.store.ticket(external_id, r["tool_call_id"])
        ]
        if not requests:
            return []
        calls = [
            self.desk.call(
                r["tool_call_id"],
                r["name"],
                r["args"],
                schema=self._edit_schema(r["name"]),
                verdicts=self._verdicts(r["name"]),
                description=r.get("description", ""),
            )
            for r in requests
        ]
        messages = snapshot.values.get("messages", [])
        return self.desk.submit(
            external_id=external_id,
            framework=FRAMEWORK,
            agent=self.agent,
            checkpoint=snapshot.config["configurable"]["checkpoint_id"],
            calls=calls,
            title=_first_user_text(messages)[:200],
            input=_first_user_text(messages),
            context=_context(messages),
            resume_policy="per_call",
            reviewers=self.reviewers,
            approval_ttl_seconds=self.approval_ttl_seconds,
        )

    def resume(
        self, graph: Any, thread_id: str, decisions: dict[str, dict] | None = None, **config: Any
    ) -> ResumeResult:
        """Answer the thread's still-pending interrupts that have a verified desk outcome.

        `decisions` (tool_call_id -> desk decision) overrides what the desk is asked for;
        the resumer passes what it was delivered. Interrupts already answered are not in
        `get_state().interrupts`, so a stale decision for one is never applied.
        """
        cfg = _config(thread_id, config)
        result = ResumeResult()
        answers: dict[str, dict] = {}
        for intr in graph.get_state(cfg).interrupts:
            request = _approval_request(intr)
            answer = self._answer(thread_id, request, (decisions or {}).get(request["tool_call_id"]), result)
            if answer is not None:
                answers[intr.id] = answer
        if answers:
            result.output = graph.invoke(_command(answers), cfg, version="v2")
            result.submitted = self._after_invoke(graph, cfg, result.output)
        return result

    async def aresume(
        self, graph: Any, thread_id: str, decisions: dict[str, dict] | None = None
    ) -> ResumeResult:
        """`resume` for graphs driven with `ainvoke`: desk I/O runs in a worker thread."""
        cfg = _config(thread_id, {})
        result = ResumeResult()
        answers: dict[str, dict] = {}
        for intr in (await graph.aget_state(cfg)).interrupts:
            request = _approval_request(intr)
            decision = (decisions or {}).get(request["tool_call_id"])
            answer = await asyncio.to_thread(self._answer, thread_id, request, decision, result)
            if answer is not None:
                answers[intr.id] = answer
        if answers:
            result.output = await graph.ainvoke(_command(answers), cfg, version="v2")
            result.submitted = await asyncio.to_thread(self._after_invoke, graph, cfg, result.output)
        return result

    # -- internals ----------------------------------------------------------------------

    def _after_invoke(self, graph: Any, cfg: dict, out: Any) -> list[Ticket]:
        """Submit what the run paused on (the tickets), or report the finished run."""
        thread_id = cfg["configurable"]["thread_id"]
        if out.interrupts:
            return self.submit_pending(graph, thread_id, out.interrupts)
        if self.desk.store.tickets(external_id_for(thread_id)):
            # Only a thread the desk knows about has a run to finish there.
            try:
                self.desk.report_run(external_id_for(thread_id), "succeeded", output=_last_ai_text(out.value))
            except DeskError as exc:  # the run is the framework's; the desk's copy may be ended already
                log.warning("could not report thread %s finished to Review Desk: %s", thread_id, exc)
        return []

    def _answer(
        self, thread_id: str, request: dict, decision: dict | None, result: ResumeResult
    ) -> dict | None:
        """The HITL decision for one interrupt, or None to leave it pending."""
        call_id = request["tool_call_id"]
        ticket = self.desk.store.ticket(external_id_for(thread_id), call_id)
        if ticket is None:
            result.refused[call_id] = "no ticket: the call was never submitted from this store"
            return None
        if decision is None:
            outcome = self.desk.outcome(ticket)
            if outcome is None:
                result.pending.append(call_id)
                return None
            if outcome.decision is None:
                # Expired or cancelled: nothing signed to verify, and the safe answer is no.
                result.answered[call_id] = outcome.status
                return {
                    "type": "reject",
                    "message": f"Review Desk: this call was {outcome.status}; it did not run.",
                }
            decision = outcome.decision
        try:
            verified = self.desk.verify(decision, ticket, current_arguments=request["args"])
        except VerificationError as exc:
            result.refused[call_id] = f"verification failed: {exc}"
            log.warning("desk decision for %s/%s refused: %s", thread_id, call_id, exc)
            return None
        result.answered[call_id] = verified.verdict
        # Kept for the guard even for a reject: should HITL skip the answer (a `when` that
        # flips on resume), the guard refuses with the reviewer's reason.
        self.desk.store.put_verified(verified_key(thread_id, call_id), verified)
        if verified.verdict == "reject":
            _consume_quietly(self.desk, verified)
            return {"type": "reject", "message": verified.reason or "Rejected on Review Desk."}
        if verified.verdict == "edit":
            return {"type": "edit", "edited_action": {"name": request["name"], "args": verified.arguments}}
        return {"type": "approve"}

    def _verdicts(self, tool: str) -> list[str]:
        allowed = self.interrupt_on[tool]["allowed_decisions"]
        verdicts = [v for v in DESK_VERDICTS if v in allowed]
        if "edit" in verdicts and self._edit_schema(tool) is None:
            verdicts.remove("edit")
        return verdicts

    def _edit_schema(self, tool: str) -> dict | None:
        if "edit" not in self.interrupt_on[tool]["allowed_decisions"]:
            return None
        found = next((t for t in self.tools if getattr(t, "name", None) == tool), None)
        return _tool_json_schema(found) if found is not None else None


def resumer_handler(build: Callable[[DeskClient], tuple[LangGraphDesk, Any]]) -> Callable[..., None]:
    """A `python -m reviewdesk_client.resumer --handler` function for LangGraph threads.

    `build(desk)` returns the gate and a freshly compiled graph on the durable checkpointer;
    the handler resumes the thread the decided ticket belongs to. Tickets of other adapters
    are left alone.
    """

    def handler(desk: DeskClient, ticket: Ticket, outcome: Any) -> None:
        thread_id = thread_id_of(ticket.external_id)
        if thread_id is None:
            return
        gate, graph = build(desk)
        result = gate.resume(graph, thread_id)
        if ticket.tool_call_id in result.refused:
            log.warning(
                "resume of %s refused %s: %s",
                thread_id,
                ticket.tool_call_id,
                result.refused[ticket.tool_call_id],
            )

    return handler


def thread_id_of(external_id: str) -> str | None:
    return external_id[3:] if external_id.startswith("lg:") else None


def __getattr__(name: str) -> Any:
    # `DeskGuard` subclasses LangChain's AgentMiddleware, so it is built on first use.
    if name == "DeskGuard":
        return _guard_class()
    raise AttributeError(name)


_GUARD_CLASS: type | None = None


def _guard_class() -> type:
    global _GUARD_CLASS
    if _GUARD_CLASS is None:
        _GUARD_CLASS = _make_guard_class()
    return _GUARD_CLASS


def _make_guard_class() -> type:
    from langchain.agents.middleware import AgentMiddleware

    class DeskGuard(AgentMiddleware):
        """Execution-time gate, listed after HITL: only a verified, consumed decision runs a call.

        It never trusts that HITL asked: a `when` predicate that flips on resume, or a
        hand-made `Command(resume=approve)`, reaches the tool through here without a
        verified decision, and is refused.
        """

        def __init__(self, desk: DeskClient, interrupt_on: dict[str, dict[str, Any]]) -> None:
            super().__init__()
            self.desk = desk
            self.interrupt_on = interrupt_on

        def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
            admitted = self._admit(request)
            if admitted is _UNGATED:
                return handler(request)
            if not _is_verified(admitted):
                return admitted
            try:
                out = handler(request)
            except Exception as exc:
                self.desk.report_tool(admitted, "failed", repr(exc)[:500])
                raise
            self.desk.report_tool(admitted, _tool_status(out), _summary(out))
            return out

        async def awrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
            admitted = await asyncio.to_thread(self._admit, request)
            if admitted is _UNGATED:
                return await handler(request)
            if not _is_verified(admitted):
                return admitted
            try:
                out = await handler(request)
            except Exception as exc:
                await asyncio.to_thread(self.desk.report_tool, admitted, "failed", repr(exc)[:500])
                raise
            await asyncio.to_thread(self.desk.report_tool, admitted, _tool_status(out), _summary(out))
            return out

        def _admit(self, request: Any) -> Any:
            """`_UNGATED`, the consumed `Verified` for this call, or the ToolMessage refusing it."""
            call = request.tool_call
            config = self.interrupt_on.get(call["name"])
            if config is None:
                return _UNGATED
            thread_id = request.runtime.config["configurable"]["thread_id"]
            verified = self.desk.store.take_verified(verified_key(thread_id, call["id"]))
            ticket = self.desk.store.ticket(external_id_for(thread_id), call["id"])
            if verified is None:
                if ticket is None and not _gated_now(config, request):
                    return _UNGATED  # `when` said no review, and nothing was ever submitted
                return self._refuse(call, ticket, "no verified Review Desk decision for this call")
            if verified.verdict == "reject":
                return self._refuse(call, ticket, f"a reviewer rejected this call: {verified.reason}")
            if verified.tool_call_id != call["id"]:
                return self._refuse(call, ticket, "the verified decision is for another call")
            try:
                # The arguments about to run must be the verified ones; then spend it, once.
                self.desk.guard(verified, call["args"])
            except (VerificationError, AlreadyConsumed, DecisionExpired, DeskError) as exc:
                return self._refuse(call, ticket, f"the decision does not let this call run ({exc})")
            return verified

        def _refuse(self, call: dict, ticket: Ticket | None, why: str) -> Any:
            from langchain_core.messages import ToolMessage

            log.warning("Review Desk guard refused %s (%s): %s", call["name"], call["id"], why)
            if ticket is not None:
                _report_quietly(self.desk, ticket, "refused", why)
            return ToolMessage(
                content=f"Refused by Review Desk: {why}. The tool did not run.",
                name=call["name"],
                tool_call_id=call["id"],
                status="error",
            )

    return DeskGuard


_UNGATED = object()


def _any_settled(tickets: Sequence[Ticket]) -> bool:
    return any(ticket.status != "pending" for ticket in tickets)


def _is_verified(admitted: Any) -> bool:
    return hasattr(admitted, "nonce") and hasattr(admitted, "verdict")


def _gated_now(config: dict[str, Any], request: Any) -> bool:
    when = config.get("when")
    return True if when is None else bool(when(request))


def _tool_status(out: Any) -> str:
    return "failed" if getattr(out, "status", None) == "error" else "confirmed"


def _summary(out: Any) -> str:
    content = getattr(out, "content", "")
    return (content if isinstance(content, str) else str(content))[:500]


def _report_quietly(desk: DeskClient, ticket_or_verified: Any, status: str, summary: str) -> None:
    # The report feeds the desk's timeline; failing to send it must not run or block a tool.
    try:
        desk.report_tool(ticket_or_verified, status, summary[:500])
    except DeskError as exc:
        log.warning("could not report %s to Review Desk: %s", status, exc)


def _consume_quietly(desk: DeskClient, verified: Verified) -> None:
    # A reject runs nothing; consuming it only tells the desk (and the resumer) it was used.
    try:
        desk.consume(verified)
    except (AlreadyConsumed, DecisionExpired, DeskError) as exc:
        log.info("reject %s already used or expired: %s", verified.decision_id, exc)


def _interrupt_config(name: str, config: Sequence[str] | dict[str, Any]) -> dict[str, Any]:
    resolved = dict(config) if isinstance(config, dict) else {"allowed_decisions": list(config)}
    allowed = resolved.get("allowed_decisions") or []
    if not {"approve", "reject"} <= set(allowed):
        raise ValueError(f"{name}: a desk-gated tool must allow approve and reject, got {allowed!r}")
    return resolved


def _approval_request(intr: Any) -> dict:
    value = intr.value
    if isinstance(value, dict) and value.get("type") == "tool_approval":
        return value
    if isinstance(value, dict) and "action_requests" in value:
        raise UnsupportedInterrupt(
            "HumanInTheLoopMiddleware in batched mode has no call ids and needs every decision "
            "at once; build it with interrupt_mode='per_call' (LangGraphDesk.middleware() does)"
        )
    raise UnsupportedInterrupt(f"interrupt {intr.id} is not a HITL tool approval: {value!r:.200}")


def _command(answers: dict[str, dict]) -> Any:
    from langgraph.types import Command

    return Command(resume=answers)


def _config(thread_id: str, extra: dict[str, Any]) -> dict[str, Any]:
    cfg = dict(extra)
    cfg["configurable"] = {**cfg.get("configurable", {}), "thread_id": thread_id}
    return cfg


def _tool_json_schema(tool: Any) -> dict | None:
    schema = getattr(tool, "tool_call_schema", None)
    if isinstance(schema, dict):
        return schema
    if hasattr(schema, "model_json_schema"):
        return schema.model_json_schema()
    return None


def _text(message: Any) -> str:
    text = getattr(message, "text", None)
    if isinstance(text, str):
        return text
    content = getattr(message, "content", "")
    return content if isinstance(content, str) else str(content)


def _context(messages: Sequence[Any]) -> list[dict[str, str]]:
    return [_context_message(m) for m in messages[-CONTEXT_MESSAGES:]]


def _context_message(message: Any) -> dict[str, str]:
    out = {"role": _ROLES.get(getattr(message, "type", ""), "user"), "content": _text(message)}
    # A ToolMessage names its tool and call: the desk says whose output a value came from.
    if out["role"] == "tool" and getattr(message, "name", None) and getattr(message, "tool_call_id", None):
        out.update(name=str(message.name), tool_call_id=str(message.tool_call_id))
    return out


def _first_user_text(messages: Sequence[Any]) -> str:
    return next((_text(m) for m in messages if getattr(m, "type", "") == "human"), "")


def _last_ai_text(value: Any) -> str:
    messages = value.get("messages", []) if isinstance(value, dict) else []
    return next((_text(m) for m in reversed(messages) if getattr(m, "type", "") == "ai"), "")[:2000]
