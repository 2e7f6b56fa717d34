"""`manage.py agents [--json]`: every loaded agent and its tools, as text and as JSON."""

from __future__ import annotations

import io
import json
import socket
import sys
from pathlib import Path

import pytest
from django.core.management import call_command

from agents import registry
from agents.catalog import describe_agent
from agents.mcp import MCPServerHTTP, MCPServerStdio
from agents.registry import Agent, agent_names, get_agent
from agents.routing import Condition, Route
from agents.tools import NEVER, Effect, Tool, ToolSource


def noop(arguments, ctx):
    return {}


def bulk_policy(arguments):
    return arguments.get("count", 0) > 10


@pytest.fixture
def files_agent(monkeypatch) -> Agent:
    """An agent with an MCP server's tools (one pinned and down) and a module's, loaded for this
    test only."""
    schema = {"type": "object", "properties": {"count": {"type": "integer"}}}
    agent = Agent(
        name="files-agent",
        system_prompt="",
        routing=(Route(to=("group:ops",)),),
        tools=(
            Tool(
                name="list_files",
                description="List files.",
                parameters=schema,
                effect=Effect.READ,
                approval=NEVER,
                func=noop,
                source=ToolSource(kind="mcp", name="files", pin="sha256:0123456789abcdef", state="down"),
            ),
            Tool(
                name="archive",
                description="Archive files.",
                parameters=schema,
                effect=Effect.IDEMPOTENT_EXTERNAL,
                approval=bulk_policy,
                func=noop,
                requires_device_keys=True,
                routing=(Route(to=("bob", "group:finance"), when=(Condition("count", ">", 100),)),),
            ),
        ),
    )
    monkeypatch.setitem(registry._AGENTS, agent.name, agent)
    return agent


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("agents", *args, stdout=out)
    return out.getvalue()


def block(text: str, heading: str) -> list[str]:
    """The lines of one agent's block, after its heading (blocks are separated by a blank line)."""
    return text.split(f"{heading}\n", 1)[1].split("\n\n", 1)[0].splitlines()


def rows_of(lines: list[str]) -> dict[str, list[str]]:
    """The tool rows (a routing line under a row is indented further), split into cells."""
    return {line.split()[0]: line.split() for line in lines[1:] if not line.startswith("    ")}


def test_the_text_lists_each_agent_with_a_row_per_tool():
    lines = block(run(), "demo: 6 tools")
    assert lines[0].split() == [
        "TOOL",
        "EFFECT",
        "APPROVAL",
        "QUORUM",
        "GRANTS",
        "DEVICE",
        "KEY",
        "SOURCE",
    ]
    rows = {
        line.split()[0]: line.split()
        for line in lines
        if line.startswith("  ") and not line.startswith("    ")
    }
    assert rows["send_email"] == ["send_email", "external", "ALWAYS", "1", "yes", "no", "agents.demo"]
    assert rows["refund_payment"] == [
        "refund_payment",
        "database",
        "agents.demo.refund_needs_approval",
        "1",
        "yes",
        "no",
        "agents.demo",
    ]
    assert rows["execute"] == ["execute", "external", "ALWAYS", "2", "no", "no", "agents.demo"]
    assert rows["ask_human"][-1] == "agents.questions"
    # The refund's route, under its row.
    assert lines[lines.index(next(line for line in lines if line.startswith("  refund_payment"))) + 1] == (
        "      routing: group:finance when amount > 1000"
    )


def test_the_text_shows_an_mcp_tools_server_pin_and_state_and_a_policy_by_name(files_agent):
    lines = block(run(), "files-agent: 2 tools")
    assert lines[0] == "  routing (when a tool's own routes do not say): group:ops always"
    rows = rows_of(lines[1:])
    assert rows["list_files"] == [
        "list_files",
        "read",
        "NEVER",
        "1",
        "yes",
        "no",
        "mcp:files",
        "(pin",
        "sha256:01234,",
        "down)",
    ]
    assert rows["archive"] == [
        "archive",
        "idempotent_external",
        "tests.reviewdesk.runs.test_agents_command.bulk_policy",
        "1",
        "yes",
        "yes",
        "tests.reviewdesk.runs.test_agents_command",
    ]
    assert "      routing: bob, group:finance when count > 100" in lines


def test_the_json_is_the_catalogs_description_of_every_loaded_agent(files_agent):
    printed = json.loads(run("--json"))
    assert list(printed) == ["agents"]
    assert [agent["name"] for agent in printed["agents"]] == agent_names()
    assert printed["agents"] == [describe_agent(get_agent(name)) for name in agent_names()]
    (files,) = [agent for agent in printed["agents"] if agent["name"] == "files-agent"]
    list_files, archive = files["tools"]
    assert list_files["source"] == {
        "kind": "mcp",
        "name": "files",
        "pin": "sha256:0123456789abcdef",
        "state": "down",
    }
    assert list_files["approval"] == "never" and list_files["policy"] == "NEVER"
    assert archive["approval"] == "depends"
    assert archive["policy"] == "tests.reviewdesk.runs.test_agents_command.bulk_policy"
    assert archive["source"] == {
        "kind": "module",
        "name": "tests.reviewdesk.runs.test_agents_command",
        "pin": None,
        "state": None,
    }
    assert archive["requires_device_keys"] is True and list_files["requires_device_keys"] is False
    # The tool's own route first, then the agent's: the order Agent.deciders asks them in.
    assert archive["routing"] == [
        {
            "to": ["bob", "group:finance"],
            "when": [{"field": "count", "op": ">", "value": 100}],
            "from": "tool",
        },
        {"to": ["group:ops"], "when": [], "from": "agent"},
    ]
    assert files["routing"] == [{"to": ["group:ops"], "when": [], "from": "agent"}]


def test_the_json_of_the_demo_says_each_tools_policy_quorum_and_grants():
    (demo,) = [agent for agent in json.loads(run("--json"))["agents"] if agent["name"] == "demo"]
    tools = {tool["name"]: tool for tool in demo["tools"]}
    assert tools["refund_payment"]["policy"] == "agents.demo.refund_needs_approval"
    assert tools["refund_payment"]["approval"] == "depends"
    assert tools["send_email"]["policy"] == "ALWAYS" and tools["send_email"]["approval"] == "always"
    assert (
        tools["execute"]["quorum"] == {"required": 2, "groups": []} and tools["execute"]["grantable"] is False
    )
    assert tools["send_email"]["parameters"] == get_agent("demo").tool("send_email").parameters
    assert tools["refund_payment"]["routing"] == [
        {"to": ["group:finance"], "when": [{"field": "amount", "op": ">", "value": 1000}], "from": "tool"}
    ]


SERVER_SCRIPT = Path(__file__).resolve().parents[2] / "fixtures" / "mcp_server.py"


@pytest.fixture
def mcp_agent(monkeypatch) -> Agent:
    """An agent with two MCP servers: the suite's server over stdio, which answers, and an HTTP
    one on a port nobody listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    agent = Agent(
        name="mcp-probed",
        system_prompt="",
        tools=(),
        mcp_servers=(
            MCPServerStdio("probe-orders", sys.executable, [str(SERVER_SCRIPT), "stdio"]),
            MCPServerHTTP(
                "probe-files", f"http://127.0.0.1:{closed_port}/mcp", headers={"X-Token": "s3cret"}
            ),
        ),
    )
    monkeypatch.setitem(registry._AGENTS, agent.name, agent)
    return agent


@pytest.mark.django_db
def test_each_mcp_server_is_said_up_or_down_as_it_answers_now_and_its_secrets_are_not_printed(mcp_agent):
    """Real servers: the stdio one is started by the command and lists its tools; the HTTP one
    refuses the connection."""
    lines = block(run(), "mcp-probed: 0 tools")
    assert lines[0] == f"  mcp server probe-orders (stdio: {sys.executable} {SERVER_SCRIPT} stdio): up"
    assert lines[1].startswith("  mcp server probe-files (http: http://127.0.0.1:")
    assert "): DOWN: MCP server probe-files " in lines[1] and "ConnectError" in lines[1]
    described = next(a for a in json.loads(run("--json"))["agents"] if a["name"] == "mcp-probed")
    assert [(s["name"], s["state"]) for s in described["mcp_servers"]] == [
        ("probe-orders", "up"),
        ("probe-files", "down"),
    ]
    assert "s3cret" not in run("--json")
    unprobed = json.loads(run("--json", "--no-probe"))["agents"]
    assert {s["state"] for a in unprobed for s in a["mcp_servers"]} == {None}
