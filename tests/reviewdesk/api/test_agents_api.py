"""GET /api/v1/agents and GET /api/v1/agents/{name}: the loaded agents and their tools, for any
signed-in caller; nobody else."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from rest_framework.test import APIClient

from agents import registry
from agents.registry import Agent, agent_names, get_agent
from agents.routing import Quorum
from agents.tools import ALWAYS, Effect, Tool, ToolSource

pytestmark = pytest.mark.django_db

SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}


def noop(arguments, ctx):
    return {}


@pytest.fixture
def load(monkeypatch):
    """load(agent): registered for this test only (the registry keeps agents by name)."""

    def add(agent: Agent) -> Agent:
        monkeypatch.setitem(registry._AGENTS, agent.name, agent)
        return agent

    return add


def mcp_agent() -> Agent:
    return Agent(
        name="files-agent",
        system_prompt="",
        requires_device_keys=True,
        tools=(
            Tool(
                name="delete_file",
                description="Delete a file.",
                parameters=SCHEMA,
                effect=Effect.EXTERNAL,
                approval=ALWAYS,
                func=noop,
                quorum=Quorum(approvals=2, groups=("ops",)),
                source=ToolSource(kind="mcp", name="files", pin="sha256:" + "ab" * 32, state="down"),
            ),
        ),
    )


def walk(client, url: str) -> list[dict]:
    items, pages = [], 0
    while url:
        pages += 1
        assert pages <= 20, "still paging: a page repeats"
        response = client.get(url)
        assert response.status_code == 200, response.json()
        items += response.json()["results"]
        parts = urlsplit(response.json()["next"] or "")
        url = f"{parts.path}?{parts.query}" if parts.path else ""
    return items


def test_a_submitter_lists_the_demo_agents_tools_with_their_schemas_effects_and_approval(personas, api_as):
    response = api_as(personas.carol, "submit").get("/api/v1/agents")
    assert response.status_code == 200
    body = response.json()
    assert body["next"] is None
    assert [agent["name"] for agent in body["results"]] == agent_names()
    demo = next(agent for agent in body["results"] if agent["name"] == "demo")
    tools = {tool["name"]: tool for tool in demo["tools"]}
    assert list(tools) == [tool.name for tool in get_agent("demo").tools]
    assert {name: tool["approval"] for name, tool in tools.items()} == {
        "lookup_customer": "never",
        "read_inbox": "never",
        "send_email": "always",
        "refund_payment": "depends",  # a policy of the arguments (and the run's history)
        "execute": "always",
        "ask_human": "always",
    }
    assert tools["send_email"]["parameters"] == get_agent("demo").tool("send_email").parameters
    assert tools["send_email"]["description"] == "Send an email to a customer."
    assert tools["refund_payment"]["effect"] == "database"
    assert tools["lookup_customer"]["effect"] == "read"
    assert tools["execute"]["quorum"] == {"required": 2, "groups": []}
    assert tools["execute"]["grantable"] is False and tools["send_email"]["grantable"] is True
    assert tools["send_email"]["source"] == {"kind": "module", "name": "agents.demo"}
    assert tools["ask_human"]["source"] == {"kind": "module", "name": "agents.questions"}
    assert demo["requires_device_keys"] is False
    # The policy's function name and the routes (which name reviewers) are not the client's.
    assert set(tools["refund_payment"]) == {
        "name",
        "description",
        "parameters",
        "effect",
        "approval",
        "grantable",
        "quorum",
        "requires_device_keys",
        "output_trusted",
        "aimed",
        "second_opinion",
        "source",
    }
    # Whose output is the desk's own truth, and which arguments aim each effect (agents.provenance).
    assert (
        tools["lookup_customer"]["output_trusted"] is True and tools["read_inbox"]["output_trusted"] is False
    )
    assert tools["send_email"]["output_trusted"] is False  # not a read: not a fact about your systems
    assert tools["send_email"]["aimed"] == ["/to"] and tools["ask_human"]["aimed"] is None


def test_a_reviewers_token_reads_one_agent_by_name(personas, api_as):
    client = api_as(personas.alice, "review")
    one = client.get("/api/v1/agents/demo")
    assert one.status_code == 200
    listed = client.get("/api/v1/agents").json()["results"]
    assert one.json() == next(agent for agent in listed if agent["name"] == "demo")


def test_an_agent_that_is_not_loaded_is_404(personas, api_as):
    response = api_as(personas.carol, "submit").get("/api/v1/agents/nobody")
    assert response.status_code == 404
    assert response["Content-Type"] == "application/problem+json"
    assert response.json()["code"] == "not_found"


@pytest.mark.parametrize("path", ["/api/v1/agents", "/api/v1/agents/demo"])
def test_no_one_reads_the_agents_without_signing_in(path):
    response = APIClient().get(path)
    assert response.status_code == 401
    assert response["Content-Type"] == "application/problem+json"
    assert response.json()["code"] == "not_authenticated"


def test_a_revoked_token_reads_no_agents(personas):
    from reviewdesk.accounts.services import token_create

    token, raw = token_create(user=personas.carol, scopes=["submit"])
    token.revoked_at = token.created_at
    token.save(update_fields=["revoked_at"])
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    response = client.get("/api/v1/agents")
    assert response.status_code == 401
    assert response.json()["code"] == "authentication_failed"


def test_an_mcp_servers_tool_says_its_server_and_the_agents_device_keys(personas, api_as, load):
    load(mcp_agent())
    response = api_as(personas.carol, "submit").get("/api/v1/agents/files-agent")
    assert response.status_code == 200
    agent = response.json()
    assert agent["requires_device_keys"] is True
    (tool,) = agent["tools"]
    assert tool["source"] == {"kind": "mcp", "name": "files"}  # the pin and state stay with the command
    assert tool["requires_device_keys"] is True  # its agent's rule
    assert tool["quorum"] == {"required": 2, "groups": ["ops"]}
    assert tool["grantable"] is False  # a quorum of two: no one reviewer's grant stands in for it
    assert tool["parameters"] == SCHEMA


def test_paging_one_at_a_time_reaches_every_agent_once_in_name_order(personas, api_as, load):
    for name in ("a-first", "m-middle", "z-last"):
        load(Agent(name=name, system_prompt="", tools=()))
    load(mcp_agent())
    items = walk(api_as(personas.carol, "submit"), "/api/v1/agents?limit=1")
    names = [agent["name"] for agent in items]
    assert names == sorted(names) == agent_names()
    assert {"a-first", "m-middle", "z-last", "files-agent", "demo"} <= set(names)


def test_a_page_ends_where_the_names_do(personas, api_as, load):
    load(Agent(name="zz-only", system_prompt="", tools=()))
    count = len(agent_names())
    client = api_as(personas.carol, "submit")
    exact = client.get(f"/api/v1/agents?limit={count}").json()
    assert len(exact["results"]) == count and exact["next"] is None
    short = client.get(f"/api/v1/agents?limit={count - 1}").json()
    assert len(short["results"]) == count - 1 and short["next"] is not None


@pytest.mark.parametrize(
    ("query", "code"),
    [
        ("cursor=not-a-cursor", "bad_cursor"),
        ("cursor=WzFd", "bad_cursor"),  # base64 of [1]: JSON, but no name
        ("limit=0", "bad_parameter"),
        ("agent=demo", "bad_parameter"),
    ],
)
def test_a_bad_query_is_400_naming_what_is_wrong(personas, api_as, query, code):
    response = api_as(personas.carol, "submit").get(f"/api/v1/agents?{query}")
    assert response.status_code == 400
    assert response.json()["code"] == code
