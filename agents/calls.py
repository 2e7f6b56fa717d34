"""From a model's turn to the calls the loop runs: run-unique ids, checked arguments, the
approval policy asked with the run's history. Garbage becomes an error result, never an approval."""

from __future__ import annotations

import json
import re
from typing import Any

from agents.canonical import canonical_json
from agents.providers import AssistantTurn, ToolCall
from agents.registry import Agent
from agents.state import CallState, CallStatus
from agents.tools import PastCall


def with_run_unique_ids(turn: AssistantTurn, model_call: int, prefix: str) -> AssistantTurn:
    """Give each call an id of our own, unique in the run: the ledger and approvals are keyed
    on it, and some OpenAI-compatible servers omit or reuse ids across turns."""
    calls = tuple(
        ToolCall(id=f"{prefix}_{model_call}_{n}", name=call.name, arguments=call.arguments)
        for n, call in enumerate(turn.tool_calls)
    )
    return AssistantTurn(content=turn.content, tool_calls=calls)


def storable(turn: AssistantTurn) -> AssistantTurn:
    """The turn with each lone surrogate (a "\\ud800" escape a server sent: no UTF-8 encodes it)
    made U+FFFD. Kept, it made the step's write fail on PostgreSQL (jsonb refuses it) and every
    page showing the run fail to render on SQLite; arguments holding one were refused anyway."""
    calls = tuple(
        ToolCall(id=_storable(call.id), name=_storable(call.name), arguments=_storable(call.arguments))
        for call in turn.tool_calls
    )
    content = None if turn.content is None else _storable(turn.content)
    return AssistantTurn(content=content, tool_calls=calls)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _storable(text: str) -> str:
    return _SURROGATE.sub("\ufffd", text)


def call_history(messages: list[dict[str, Any]]) -> list[PastCall]:
    """The run's earlier tool calls, oldest first, with the result the model was shown.

    Approval policies read it, so that a limit cannot be split across calls (three refunds
    of 100, 100 and 50 on one order). Arguments that are not a JSON object count as empty.
    """
    outcomes: dict[str, Any] = {}
    for message in messages:
        if message.get("role") == "tool":
            try:
                outcomes[message["tool_call_id"]] = json.loads(message.get("content") or "null")
            except (KeyError, TypeError, json.JSONDecodeError):
                continue
    history = []
    for message in messages:
        if message.get("role") != "assistant":
            continue
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            try:
                arguments = json.loads(function.get("arguments") or "{}")
            except (TypeError, json.JSONDecodeError):
                arguments = {}
            if not isinstance(arguments, dict):
                arguments = {}
            history.append(PastCall.of(str(function.get("name")), arguments, outcomes.get(call.get("id"))))
    return history


def prepare_batch(
    agent: Agent, calls: tuple[ToolCall, ...], history: list[PastCall], *, world: Any = None
) -> list[CallState]:
    """Prepare each call with the run's history and the batch's earlier calls (not yet run);
    `world`: for policies that read it (`Tool.needs_approval`)."""
    batch: list[CallState] = []
    for call in calls:
        seen = history + [PastCall.of(c.name, c.arguments, c.result) for c in batch]
        batch.append(prepare_call(agent, call, seen, world=world))
    return batch


def prepare_call(
    agent: Agent, call: ToolCall, history: list[PastCall] | None = None, *, world: Any = None
) -> CallState:
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
    needs_human = tool.needs_approval(arguments, history or (), world=world)
    status = CallStatus.AWAITING if needs_human else CallStatus.READY
    return CallState(id=call.id, name=call.name, arguments=arguments, status=status)


def _invalid(call: ToolCall, arguments: Any, error: str) -> CallState:
    return CallState(
        id=call.id,
        name=call.name,
        arguments=arguments if isinstance(arguments, dict) else None,
        status=CallStatus.INVALID,
        result={"error": error},
    )
