"""The openai provider over real HTTP to a local OpenAI-compatible server."""

from __future__ import annotations

import json

import pytest

from agents.providers import ProviderError
from agents.providers.openai import OpenAIProvider
from agents.registry import get_agent
from tests.llm_server import calls, error, slow, text

MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "email ada"}]
EMAIL = {"to": "ada@example.com", "subject": "Refund", "body": "On its way."}


def provider(server, **options) -> OpenAIProvider:
    options.setdefault("max_retries", 0)
    options.setdefault("timeout", 5)
    return OpenAIProvider(model="test-model", base_url=server.url, api_key="sk-test", **options)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_tool_calls_come_back_with_their_ids_names_and_arguments(llm_server, stream):
    llm_server.script(calls(("lookup_customer", {"email": "ada@example.com"}), ("send_email", EMAIL)))
    turn = provider(llm_server, stream=stream).complete(MESSAGES, get_agent("demo").tool_specs())
    assert [(c.name, json.loads(c.arguments)) for c in turn.tool_calls] == [
        ("lookup_customer", {"email": "ada@example.com"}),
        ("send_email", EMAIL),
    ]
    assert len({c.id for c in turn.tool_calls}) == 2
    request = llm_server.requests[0]
    assert request["model"] == "test-model"
    assert request["messages"] == MESSAGES
    assert {t["function"]["name"] for t in request["tools"]} == {
        "lookup_customer",
        "read_inbox",
        "send_email",
        "refund_payment",
        "execute",
        "ask_human",
    }
    assert bool(request.get("stream")) is stream


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_plain_content_comes_back_whole(llm_server, stream):
    llm_server.script(text("All done, Ada has been told."))
    turn = provider(llm_server, stream=stream).complete(MESSAGES, [])
    assert turn.content == "All done, Ada has been told."
    assert turn.tool_calls == ()
    assert "tools" not in llm_server.requests[0]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_429_is_retried_and_then_succeeds(llm_server, stream):
    llm_server.script(error(429, "slow down", **{"retry-after-ms": "10"}), text("ok"))
    turn = provider(llm_server, stream=stream, max_retries=2).complete(MESSAGES, [])
    assert turn.content == "ok"
    assert len(llm_server.requests) == 2


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_500_is_classified_transient(llm_server, stream):
    llm_server.script(error(500, "overloaded"))
    with pytest.raises(ProviderError) as raised:
        provider(llm_server, stream=stream).complete(MESSAGES, [])
    assert raised.value.transient is True
    assert "500" in str(raised.value)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_400_is_classified_permanent_and_not_retried(llm_server, stream):
    llm_server.script(error(400, "bad tool schema"), text("never reached"))
    with pytest.raises(ProviderError) as raised:
        provider(llm_server, stream=stream, max_retries=3).complete(MESSAGES, [])
    assert raised.value.transient is False
    assert len(llm_server.requests) == 1


def test_a_timeout_is_classified_transient(llm_server):
    llm_server.script(slow(2.0, text("too late")))
    with pytest.raises(ProviderError) as raised:
        provider(llm_server, timeout=0.3).complete(MESSAGES, [])
    assert raised.value.transient is True


def test_an_unreachable_server_is_transient():
    unreachable = OpenAIProvider(model="m", base_url="http://127.0.0.1:9/v1", max_retries=0, timeout=2)
    with pytest.raises(ProviderError) as raised:
        unreachable.complete(MESSAGES, [])
    assert raised.value.transient is True
