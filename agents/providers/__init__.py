"""Model providers behind one interface; `provider_for` builds one from a run's spec."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from agents.providers.base import AssistantTurn, ModelProvider, ProviderError, ToolCall
from agents.providers.scripted import ScriptedProvider, script_errors

__all__ = [
    "AssistantTurn",
    "ModelProvider",
    "ProviderError",
    "ProviderName",
    "ToolCall",
    "model_spec_errors",
    "provider_for",
]


class ProviderName(StrEnum):
    """The `provider` of a run's model spec."""

    SCRIPTED = "scripted"  # deterministic turns from the spec's script, no credentials
    OPENAI = "openai"  # any OpenAI-compatible Chat Completions server


def model_spec_errors(spec: Any, tool_names: set[str]) -> list[str]:
    if not isinstance(spec, dict):
        return ["model: must be an object"]
    provider = spec.get("provider")
    if provider == ProviderName.SCRIPTED:
        return script_errors(spec.get("script"), tool_names)
    if provider == ProviderName.OPENAI:
        errors = []
        if not isinstance(spec.get("name"), str) or not spec["name"]:
            errors.append("model/name: the model name is required for the openai provider")
        if not isinstance(spec.get("stream", False), bool):
            errors.append("model/stream: must be true or false")
        unknown = set(spec) - {"provider", "name", "stream"}
        if unknown:
            errors.append(f"model: unknown fields {', '.join(sorted(unknown))}")
        return errors
    return [f"model/provider: must be one of {', '.join(ProviderName)}"]


def provider_for(spec: dict[str, Any], *, openai_options: dict[str, Any] | None = None) -> ModelProvider:
    if spec["provider"] == ProviderName.SCRIPTED:
        return ScriptedProvider(spec["script"])
    from agents.providers.openai import OpenAIProvider

    return OpenAIProvider(model=spec["name"], stream=spec.get("stream", False), **(openai_options or {}))
