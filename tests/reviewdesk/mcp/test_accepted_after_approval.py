"""An MCP call approved under one definition of its tool, whose server then serves another that
an admin accepts before the call runs: on the desk (real database, the suite's MCP server over
stdio, the run's task body executed in this process as the neighbouring tests do). The
reviewer's consent was to the call as the tool was then described, so the call goes back to a
human, who reads the server and its new definition on the item's page, and the server receives
nothing until that human decides again."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

import agents.registry
from agents import mcp
from agents.mcp import ALWAYS, NEVER, MCPServerStdio
from agents.registry import Agent, register
from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.approvals.models import ApprovalRequest
from reviewdesk.runs.execution import run_execute
from reviewdesk.runs.models import Run, RunStatus
from reviewdesk.runs.services import run_submit

pytestmark = pytest.mark.django_db

SERVER_SCRIPT = Path(__file__).resolve().parents[2] / "fixtures" / "mcp_server.py"
NAME = "mcp-accepted-after-approval"


@pytest.fixture
def files(tmp_path):
    return {"calls": tmp_path / "calls.jsonl", "description": tmp_path / "description.txt"}


@pytest.fixture
def agent(files):
    server = MCPServerStdio(
        "orders-accepted",
        sys.executable,
        [str(SERVER_SCRIPT), "stdio"],
        env={"MCP_CALLS_FILE": str(files["calls"]), "MCP_DESCRIPTION_FILE": str(files["description"])},
        approval={"lookup_*": NEVER, "*": ALWAYS},
    )
    registered = register(Agent(name=NAME, system_prompt="Help.", tools=(), mcp_servers=(server,)))
    yield registered
    agents.registry._AGENTS.pop(NAME, None)
    mcp.close_all()


def executed(personas, script) -> Run:
    run = run_submit(
        submitter=personas.carol,
        agent=NAME,
        input="Delete order A-1.",
        model={"provider": "scripted", "script": script},
    )
    run_execute(run_id=run.id, worker="in-process")
    run.refresh_from_db()
    return run


def received(files) -> list[dict]:
    calls = files["calls"]
    return [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []


def test_a_call_approved_before_an_admin_accepted_a_new_definition_goes_back_to_a_human(
    agent, files, personas
):
    # A worker lists the server first (its tools are pinned), as a deployment's first run does.
    assert executed(personas, [{"content": "Hello."}]).status == RunStatus.SUCCEEDED
    run = executed(
        personas,
        [
            {"tool_calls": [{"name": "delete_order", "arguments": {"order_id": "A-1"}}]},
            {"content": "Deleted."},
        ],
    )
    assert run.status == RunStatus.INPUT_REQUIRED, run.error
    first = ApprovalRequest.objects.get(run=run, status="pending")
    approval_decide(
        approval_id=first.id,
        reviewer=personas.alice,
        verdict="approve",
        checkpoint_id=str(first.checkpoint_id),
    )

    # Before the resume runs, the server describes the tool otherwise; a worker sees it, and an
    # admin accepts the new definition.
    files["description"].write_text("Delete every order of the customer, and their account.")
    assert executed(personas, [{"content": "Hello again."}]).status == RunStatus.SUCCEEDED
    call_command("mcp_tools", "--accept", "orders-accepted", "--yes", stdout=io.StringIO())

    run_execute(run_id=run.id, worker="in-process")
    run.refresh_from_db()

    assert run.status == RunStatus.INPUT_REQUIRED, run.error
    assert received(files) == []
    again = ApprovalRequest.objects.get(run=run, status="pending")
    assert (again.tool_call_id, again.tool) == (first.tool_call_id, "delete_order")
    assert again.reason == (
        "The agent's definition changed since this call was decided: "
        "the MCP server's definition of delete_order changed since it was decided."
    )
    assert first.decisions.get().consumed_at is None
    # The reviewer asked again reads the server and the definition now pinned.
    client = Client()
    client.force_login(personas.alice)
    page = client.get(reverse("approval", args=[again.id])).content.decode()
    assert "MCP server <code>orders-accepted</code>" in page
    assert "Delete every order of the customer, and their account." in page

    approval_decide(
        approval_id=again.id,
        reviewer=personas.alice,
        verdict="approve",
        checkpoint_id=str(again.checkpoint_id),
    )
    run_execute(run_id=run.id, worker="in-process")
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert [c["tool"] for c in received(files)] == ["delete_order"]
