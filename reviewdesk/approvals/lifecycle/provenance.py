"""Where a raised call's arguments came from, as the desk stores it with the request.

`agents.provenance` does the finding over a run's log; this module hands it the run's messages
up to the call and what the agent says of its tools (whose output is trusted, which arguments
aim the effect), and keeps the answer in the shape `ApprovalRequest.provenance` stores:
{"sources": {pointer: [source, ...]}, "flags": [...]}. An edit's arguments get theirs when the
reviewer decides (`edited_provenance`): a value kept keeps its sources, a value the reviewer
wrote is the reviewer's.
"""

from __future__ import annotations

from typing import Any

from agents.addressed import injection_flags
from agents.provenance import ToolTrust, leaves, provenance_flags, provenance_of
from agents.questions import asks_human
from agents.registry import Agent, UnknownAgent, get_agent
from agents.tools import Effect
from reviewdesk.approvals.models import Decision, Verdict
from reviewdesk.runs.models import Message, Run


def call_provenance(
    run: Run, *, tool_call_id: str, tool_name: str, arguments: Any, log: list[dict[str, Any]] | None = None
) -> dict[str, Any] | None:
    """The stored provenance of a call about to be raised, or None for an external run (its
    framework keeps the conversation) or a call whose agent this process does not load. `log`:
    the run's live messages when the caller holds them (the worker does), else they are read."""
    if run.is_external:
        return _external_call_provenance(run, tool_call_id=tool_call_id, arguments=arguments)
    try:
        agent = get_agent(run.agent)
    except UnknownAgent:
        return None
    tool = agent.tool(tool_name)
    sources = provenance_of(arguments, messages_before(run, tool_call_id, log=log), tool_trust(agent, run))
    flags = provenance_flags(
        sources,
        aimed=tool.aimed if tool is not None else None,
        # Every effect on the world counts, the demo ledger's refunds as much as an email.
        external=tool is None or tool.effect != Effect.READ,
    )
    return {"sources": sources, "flags": flags + injection_flags(arguments)}


def _external_call_provenance(run: Run, *, tool_call_id: str, arguments: Any) -> dict[str, Any] | None:
    """A framework's call, traced over what it shared: its task and its context's messages.
    None when it shared none (then nothing is known, not "model-written"). The framework says
    which of its tools' outputs are trusted (`context.trusted_tools`); the rest are not. It names
    no aimed arguments: all of them are."""
    context = run.context or {}
    shared = context.get("messages") or []
    if not shared:
        return None
    trusted = set(context.get("trusted_tools") or [])
    # Its user messages are its own word, marked shared; "[Review Desk] Note from reviewer" in
    # them is text: the desk knows the notes it wrote, and none of them is there.
    trust = ToolTrust(trusted=lambda name: name in trusted, desk_log=False)
    sources = provenance_of(arguments, messages_before(run, tool_call_id, log=shared), trust)
    if run.input:  # the run's input is its task, said once at the submit: step 0
        task = provenance_of(
            arguments, [{"role": "user", "content": run.input}], ToolTrust(trusted=lambda name: False)
        )
        sources = {pointer: _with_task(task[pointer], found) for pointer, found in sources.items()}
    flags = provenance_flags(sources, aimed=None, external=True)
    return {"sources": sources, "flags": flags + injection_flags(arguments)}


def _with_task(task: list[dict[str, Any]], shared: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A value's sources in the run's input (step 0), ahead of those in what was shared."""
    said = [source | {"step": 0} for source in task if source["kind"] == "task"]
    if not said:
        return shared
    return said + [source for source in shared if source["kind"] != "none"]


def messages_before(
    run: Run, tool_call_id: str, *, log: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """The run's live log up to the assistant message that made the call: what the model had
    read when it wrote the arguments (a sibling's output, logged after, it had not)."""
    if log is None:
        log = list(
            Message.objects.filter(run=run, superseded_at__isnull=True)
            .order_by("position")
            .values_list("body", flat=True)
        )
    for index in range(len(log) - 1, -1, -1):
        if any(_call_id(call) == tool_call_id for call in log[index].get("tool_calls") or []):
            return log[:index]
    return log


def _call_id(call: Any) -> str | None:
    return str(call.get("id")) if isinstance(call, dict) else None


def tool_trust(agent: Agent, run: Run) -> ToolTrust:
    def trusted(name: str) -> bool:
        tool = agent.tool(name)
        return tool is not None and tool.trusts_output  # a tool no longer declared: untrusted

    return ToolTrust(
        trusted=trusted,
        answers_human=lambda name: asks_human(agent.tool(name)),
        rejected=_rejected_calls(run),
    )


def _rejected_calls(run: Run):
    """Whether a reviewer rejected a call of this run, as the decisions record it: read once,
    and only when a tool's output reads like a rejection (most raises never ask)."""
    found: set[str] | None = None

    def rejected(call_id: str) -> bool:
        nonlocal found
        if found is None:
            found = set(
                Decision.objects.filter(request__run=run, verdict=Verdict.REJECT).values_list(
                    "request__tool_call_id", flat=True
                )
            )
        return call_id in found

    return rejected


def edited_provenance(
    approval_provenance: dict[str, Any] | None, original: Any, edited: Any, *, reviewer: str
) -> dict[str, Any]:
    """Sources for an edit's arguments: the request's for each value the edit kept at its place,
    the reviewer's for any other (they wrote it, or moved it). `original`: the call's arguments."""
    before = (approval_provenance or {}).get("sources") or {}
    was = dict(leaves(original))
    sources: dict[str, list[dict[str, Any]]] = {}
    for pointer, value in leaves(edited):
        kept = pointer in before and pointer in was and _same(was[pointer], value)
        sources[pointer] = (
            before[pointer] if kept else [{"kind": "reviewer", "match": "exact", "by": reviewer}]
        )
    return {"sources": sources}


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b  # 1 and 1.0 and True are three different arguments
