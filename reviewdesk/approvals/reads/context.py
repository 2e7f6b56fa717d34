"""What the approval page and the terminal review show of a call beyond its arguments: the
conversation that led to it, the tool's description and effect, and a preview of what it would do."""

from __future__ import annotations

import json
import logging
from typing import Any

from django.conf import settings

from agents.gate import CallBinding
from agents.registry import UnknownAgent, get_agent
from agents.tools import Effect, Tool, ToolContext, schema_errors
from reviewdesk.agent_modules.loading import not_loaded_here
from reviewdesk.approvals.models import (
    ApprovalKind,
    ApprovalRequest,
)
from reviewdesk.lib.tool_world import sandbox_config, tool_world

logger = logging.getLogger(__name__)


# A message or result longer than this is folded on the page (<details>), open on request.
FOLD_CHARS = 600


FOLD_LINES = 12


def _pretty_json_text(text: Any) -> str:
    """JSON that arrives as text (a tool call's arguments, a tool's result), re-indented."""
    if not isinstance(text, str):
        return json.dumps(text, indent=2, ensure_ascii=False)
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except ValueError:
        return text


def _long(text: str) -> bool:
    return len(text) > FOLD_CHARS or text.count("\n") >= FOLD_LINES


def _chat_entry(body: dict[str, Any], tool_call_id: str) -> dict[str, Any]:
    """One chat message as the page shows it: who spoke, their text, the calls they made."""
    role = str(body.get("role", ""))
    content = body.get("content")
    text = content if isinstance(content, str) else ("" if content is None else json.dumps(content))
    result_of = body.get("tool_call_id")
    calls = [
        {
            "id": call.get("id", ""),
            "name": (call.get("function") or {}).get("name", ""),
            "arguments": _pretty_json_text((call.get("function") or {}).get("arguments", "")),
            "this_call": call.get("id") == tool_call_id,
        }
        for call in body.get("tool_calls") or []
        if isinstance(call, dict)
    ]
    if result_of:
        text = _pretty_json_text(text)
    return {
        "role": role,
        "model_text": role == "assistant",  # written by the model: untrusted
        "text": text,
        "long": _long(text),
        "result_of": result_of,
        "tool_calls": calls,
        "asks_for_this_call": any(c["this_call"] for c in calls),
    }


def asking_text(approval: ApprovalRequest) -> str:
    """The model's words in the message that made this call ("" when it made it without any):
    the desk pane's "why the agent asks". Read newest first and stopped at that message, so a
    long run costs a few rows, not its whole conversation as on the approval's page. An
    external call's are the reason its framework sent."""
    if approval.run.is_external:
        return approval.reason if approval.kind == ApprovalKind.TOOL_CALL else ""
    bodies = (
        approval.run.messages.filter(superseded_at__isnull=True)
        .order_by("-position")
        .values_list("body", flat=True)
        .iterator(chunk_size=8)
    )
    for body in bodies:
        if isinstance(body, dict) and body.get("tool_calls"):
            entry = _chat_entry(body, approval.tool_call_id)
            if entry["asks_for_this_call"]:
                return entry["text"]
    return ""


def approval_tool(approval: ApprovalRequest) -> Tool | None:
    """The declared tool this approval is for, or None when its agent or tool is gone. An
    external run's call has none: its tool is its framework's (a desk agent of the same name
    is another agent)."""
    if approval.run.is_external:
        return None
    try:
        return get_agent(approval.run.agent).tool(approval.tool)
    except UnknownAgent:
        return None


def _tool_missing(approval: ApprovalRequest) -> str:
    """Why `approval_tool` found no tool, in words: the agent is not loaded here, or has no such tool."""
    try:
        get_agent(approval.run.agent)
    except UnknownAgent:
        return not_loaded_here(approval.run.agent)
    return "this tool is no longer declared"


def external_conversation(context: Any) -> list[dict[str, Any]]:
    """An external run's context messages (its framework's, untrusted) as the page's chat
    entries: every one marked untrusted, as nothing in it was the desk's to see happen."""
    messages = context.get("messages", []) if isinstance(context, dict) else []
    return [
        {**_chat_entry({"role": m.get("role", ""), "content": m.get("content", "")}, ""), "model_text": True}
        for m in messages
        if isinstance(m, dict)
    ]


def external_facts(arguments: Any) -> list[tuple[str, str]]:
    """An external call's arguments as the preview rows the desk shows (top-level fields, each
    value as JSON unless text): what is signed, and nothing the framework wrote about it."""
    if not isinstance(arguments, dict):
        return []
    return [
        (str(k), v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)) for k, v in arguments.items()
    ]


def external_preview(*, tool: str, schema: Any, arguments: Any) -> dict[str, Any]:
    """`approval_preview` for an external call: no desk code runs for it. The arguments are
    checked against the framework's schema (when it sent one) and shown as rows; the
    framework's own rendering is shown apart, as untrusted (`external.preview`)."""
    errors = schema_errors(schema, arguments) if isinstance(schema, dict) else []
    if errors:
        return {"preview": None, "errors": errors}
    return {"preview": {"title": tool, "rows": external_facts(arguments)}, "errors": []}


def _external_context(approval: ApprovalRequest) -> dict[str, Any]:
    run = approval.run
    context = run.context if isinstance(run.context, dict) else {}
    return {
        "agent": run.agent,
        "submitter": run.submitted_by.get_username(),
        "task": run.input or run.title,
        "run_status": run.status,
        "tool_description": approval.description or "(its framework sent no description)",
        "effect": "",
        "mcp_server": "",
        "mcp_pin": "",
        "irreversible": False,
        "policy_reason": f"{run.framework} gated this call and asks the desk"
        if approval.kind == ApprovalKind.TOOL_CALL
        else approval.reason,
        "conversation": external_conversation(context),
        "conversation_truncated": bool(context.get("truncated")),
        "asking_text": approval.reason if approval.kind == ApprovalKind.TOOL_CALL else "",
    }


def approval_context(approval: ApprovalRequest) -> dict[str, Any]:
    """Everything a reviewer needs to judge one approval, in the order they think about it:
    what it is (agent, submitter, task, tool), why the agent asks (the conversation so far
    and the model's message that made the call), and what was decided before in this run.
    An external run's call: its framework's context and texts, all untrusted."""
    run = approval.run
    if run.is_external:
        return {**_external_context(approval), "decisions": _earlier_decisions(approval)}
    tool = approval_tool(approval)
    bodies = (
        run.messages.filter(superseded_at__isnull=True).order_by("position").values_list("body", flat=True)
    )
    conversation = [_chat_entry(body, approval.tool_call_id) for body in bodies if isinstance(body, dict)]
    asking = next((m for m in reversed(conversation) if m["asks_for_this_call"]), None)
    return {
        "agent": run.agent,
        "submitter": run.submitted_by.get_username(),
        "task": run.input,
        "run_status": run.status,
        "tool_description": tool.description if tool else f"({_tool_missing(approval)})",
        "effect": str(tool.effect) if tool else "",
        # An MCP tool: the server that serves it and the pin its description was shown from.
        "mcp_server": tool.source.name if tool and tool.source and tool.source.kind == "mcp" else "",
        "mcp_pin": (tool.source.pin or "") if tool and tool.source and tool.source.kind == "mcp" else "",
        "irreversible": bool(tool and tool.effect == Effect.EXTERNAL),
        "policy_reason": approval.reason,
        "conversation": conversation,
        "asking_text": asking["text"] if asking else "",
        "decisions": _earlier_decisions(approval),
    }


def _earlier_decisions(approval: ApprovalRequest) -> list[dict[str, Any]]:
    earlier = (
        ApprovalRequest.objects.filter(run_id=approval.run_id)
        .exclude(pk=approval.pk)
        .prefetch_related("decisions__reviewer")
        .order_by("created_at")
    )
    return [
        {
            "id": str(a.pk),
            "tool": a.tool,
            "kind": a.kind,
            "status": a.status,
            "verdict": a.decision.verdict if a.decision else None,
            "reviewer": a.decision.reviewer.get_username() if a.decision else None,
            "reason": a.decision.reason if a.decision else "",
            "decided_at": a.decision.decided_at if a.decision else None,
        }
        for a in earlier
    ]


def approval_preview(approval: ApprovalRequest, arguments: Any) -> dict[str, Any]:
    """What the call would do with `arguments`: {"preview": {...} or None, "errors": [...]}.

    Arguments that break the tool's schema get errors and no preview. The preview runs
    in the context the call would run in (its world, working directory, time limit), and
    only reads: a preview that fails says so instead of failing the page.
    """
    if approval.run.is_external:
        return external_preview(tool=approval.tool, schema=approval.arguments_schema, arguments=arguments)
    tool = approval_tool(approval)
    if tool is None:
        return {"preview": None, "errors": [_tool_missing(approval)]}
    errors = tool.validation_errors(arguments)
    if errors:
        return {"preview": None, "errors": errors}
    if tool.preview is None:
        return {"preview": None, "errors": []}
    run_id = str(approval.run_id)
    ctx = ToolContext(
        run_id=run_id,
        tool_call_id=approval.tool_call_id,
        idempotency_key=CallBinding(run_id, None, approval.tool_call_id, approval.tool).idempotency_key,
        workdir=settings.DESK_RUNS_DIR / run_id,
        world=tool_world(),
        timeout_seconds=settings.DESK_EXECUTE_TIMEOUT_SECONDS,
        sandbox=sandbox_config(),
    )
    try:
        preview = tool.preview(arguments, ctx)
    except Exception:  # a tool author's code: the page must still show the arguments
        logger.exception("preview of %s failed", approval.tool)
        return {"preview": None, "errors": ["the preview failed; judge by the arguments"]}
    return {"preview": preview, "errors": []}
