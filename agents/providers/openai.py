"""Any OpenAI-compatible Chat Completions server, through the `openai` package.

The client retries transient failures itself (connection errors, timeouts,
408/409/429 and 5xx, with backoff, `max_retries` times); what still fails is
raised as `ProviderError`, classified for the run's retry logic: transient
(worth retrying later) or permanent (the request itself is wrong).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from agents.providers.base import AssistantTurn, ProviderError, ToolCall

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolUnionParam

TRANSIENT_STATUS = {408, 409, 429}


class OpenAIProvider:
    def __init__(
        self,
        *,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        stream: bool = False,
    ) -> None:
        import openai

        self.model = model
        self.stream = stream
        self._openai = openai
        self.client = openai.OpenAI(
            base_url=base_url,
            # Local OpenAI-compatible servers often need no key; the client insists on one.
            api_key=api_key or "not-needed",
            timeout=timeout,
            max_retries=max_retries,
        )

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AssistantTurn:
        try:
            if self.stream:
                return self._complete_streamed(messages, tools)
            response = self.client.chat.completions.create(
                model=self.model, messages=_messages(messages), tools=self._tools(tools)
            )
            if not response.choices:
                raise ProviderError("the model returned no choices", transient=True)
            message = response.choices[0].message
            calls = []
            for call in message.tool_calls or []:
                if call.type != "function":  # we declare function tools only
                    raise ProviderError(f"the model made a {call.type!r} tool call", transient=False)
                calls.append(
                    ToolCall(id=call.id, name=call.function.name, arguments=call.function.arguments or "{}")
                )
            return AssistantTurn(content=message.content, tool_calls=tuple(calls))
        except ProviderError:
            raise
        except Exception as exc:
            raise classify(exc) from exc

    def _complete_streamed(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> AssistantTurn:
        stream = self.client.chat.completions.create(
            model=self.model, messages=_messages(messages), tools=self._tools(tools), stream=True
        )
        content: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        for chunk in stream:
            if not chunk.choices:
                continue
            delta = chunk.choices[0].delta
            if delta.content:
                content.append(delta.content)
            for part in delta.tool_calls or []:
                call = calls.setdefault(part.index, {"id": None, "name": "", "arguments": []})
                if part.id:
                    call["id"] = part.id
                if part.function and part.function.name:
                    call["name"] += part.function.name
                if part.function and part.function.arguments:
                    call["arguments"].append(part.function.arguments)
        tool_calls = tuple(
            ToolCall(
                id=call["id"] or f"call_{index}",
                name=call["name"],
                arguments="".join(call["arguments"]) or "{}",
            )
            for index, call in sorted(calls.items())
        )
        return AssistantTurn(content="".join(content) or None, tool_calls=tool_calls)

    def _tools(self, tools: list[dict[str, Any]]) -> Any:
        # No tools: leave the parameter out (some servers refuse an empty list).
        return cast("list[ChatCompletionToolUnionParam]", tools) if tools else self._openai.omit


def _messages(messages: list[dict[str, Any]]) -> list[ChatCompletionMessageParam]:
    # Our messages are the Chat Completions shapes already, as plain dicts.
    return cast("list[ChatCompletionMessageParam]", messages)


def classify(exc: Exception) -> ProviderError:
    """Transient: retrying later may work. Permanent: the request itself is refused."""
    import openai

    if isinstance(exc, openai.APITimeoutError | openai.APIConnectionError):
        return ProviderError(f"model server unreachable: {exc}", transient=True, reached=False)
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        transient = status >= 500 or status in TRANSIENT_STATUS
        return ProviderError(
            f"model server answered {status}: {exc.message}", transient=transient, status=status
        )
    if isinstance(exc, openai.APIError):  # a broken stream or an unparsable answer
        return ProviderError(f"model server error: {exc}", transient=True)
    return ProviderError(f"model call failed: {type(exc).__name__}: {exc}", transient=False)
