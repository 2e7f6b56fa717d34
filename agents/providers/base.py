"""The one interface every model provider implements."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # raw JSON text, exactly as the model produced it


@dataclass(frozen=True)
class AssistantTurn:
    content: str | None
    tool_calls: tuple[ToolCall, ...] = field(default_factory=tuple)

    def as_message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in self.tool_calls
            ]
        return message


class ProviderError(Exception):
    """A model call that failed; `transient` says whether retrying may help."""

    def __init__(
        self, message: str, *, transient: bool, status: int | None = None, reached: bool = True
    ) -> None:
        super().__init__(message)
        self.transient = transient
        self.status = status  # the model server's HTTP status, when it answered with one
        self.reached = reached  # False: the model server could not be reached (or timed out)


class ModelProvider(Protocol):
    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AssistantTurn: ...
