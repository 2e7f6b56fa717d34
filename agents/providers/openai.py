"""Any OpenAI-compatible Chat Completions server, through the `openai` package."""

from __future__ import annotations

from typing import Any

from agents.providers.base import AssistantTurn, ProviderError, ToolCall


class OpenAIProvider:
    def __init__(
        self,
        *,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
    ) -> None:
        import openai

        self.model = model
        self._openai = openai
        self.client = openai.OpenAI(
            base_url=base_url,
            api_key=api_key or "unused",
            timeout=timeout,
            max_retries=max_retries,
        )

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AssistantTurn:
        openai = self._openai
        try:
            response = self.client.chat.completions.create(
                model=self.model, messages=messages, tools=tools or openai.NOT_GIVEN
            )
        except (openai.APITimeoutError, openai.APIConnectionError, openai.RateLimitError) as exc:
            raise ProviderError(str(exc), transient=True) from exc
        except openai.APIStatusError as exc:
            raise ProviderError(str(exc), transient=exc.status_code >= 500) from exc
        message = response.choices[0].message
        calls = tuple(
            ToolCall(id=c.id, name=c.function.name, arguments=c.function.arguments or "{}")
            for c in (message.tool_calls or [])
        )
        return AssistantTurn(content=message.content, tool_calls=calls)
