"""The scripted provider: deterministic turns, no credentials.

A script is a list of turns, each `{"content": "..."}` or
`{"tool_calls": [{"name": "...", "arguments": {...}}]}`. The turn played is
chosen by how many assistant messages the conversation already holds, so a
resumed run picks up where it left off.
"""

from __future__ import annotations

import json
from typing import Any

from agents.providers.base import AssistantTurn, ToolCall


def script_errors(script: Any, tool_names: set[str]) -> list[str]:
    """What is wrong with a script, as readable strings; empty when valid."""
    if not isinstance(script, list) or not script:
        return ["script: must be a non-empty list of turns"]
    errors: list[str] = []
    for index, turn in enumerate(script):
        where = f"script/{index}"
        if not isinstance(turn, dict) or not ({"content", "tool_calls"} & turn.keys()):
            errors.append(f"{where}: a turn is {{'content': str}} or {{'tool_calls': [...]}}")
            continue
        if "content" in turn and not isinstance(turn["content"], str):
            errors.append(f"{where}/content: must be a string")
        calls = turn.get("tool_calls", [])
        if not isinstance(calls, list):
            errors.append(f"{where}/tool_calls: must be a list")
            continue
        for n, call in enumerate(calls):
            if not isinstance(call, dict) or not isinstance(call.get("name"), str):
                errors.append(f"{where}/tool_calls/{n}: needs a 'name'")
            elif call["name"] not in tool_names:
                errors.append(f"{where}/tool_calls/{n}/name: unknown tool {call['name']!r}")
            elif not isinstance(call.get("arguments", {}), dict):
                errors.append(f"{where}/tool_calls/{n}/arguments: must be an object")
    return errors


class ScriptedProvider:
    def __init__(self, script: list[dict[str, Any]]) -> None:
        self.script = script

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AssistantTurn:
        index = sum(1 for m in messages if m.get("role") == "assistant")
        if index >= len(self.script):
            return AssistantTurn(content="Done.")
        turn = self.script[index]
        calls = tuple(
            ToolCall(
                id=f"call_{index}_{n}",
                name=call["name"],
                arguments=json.dumps(call.get("arguments", {})),
            )
            for n, call in enumerate(turn.get("tool_calls", []))
        )
        return AssistantTurn(content=turn.get("content"), tool_calls=calls)
