"""A run resumed under another definition of its agent, on the desk (real database, the task
run in-process as the neighbouring tests do): the run records the definition it was submitted
with; a call approved under one definition and resumed under another is checked again: where
it no longer holds it goes back to a human with the reason, where it does the run goes on and
its timeline says what changed, and a tool that is gone fails the call for the model."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import reverse

import agents.registry
from agents.definition import fingerprint
from agents.registry import Agent, get_agent, register
from agents.routing import Quorum, Route
from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.approvals.models import ApprovalRequest
from reviewdesk.audit.models import AuditEvent
from reviewdesk.audit.verification import audit_verify
from reviewdesk.desk.views.runs import run_timeline
from reviewdesk.runs.execution import run_execute
from reviewdesk.runs.models import Message, Run, RunStatus, SideEffect

pytestmark = pytest.mark.django_db

NAME = "definition-change"


def agent_with(**send_email: Any) -> Agent:
    """The demo's tools under this test's agent name, send_email changed as given."""
    tools = tuple(replace(t, **send_email) if t.name == "send_email" else t for t in get_agent("demo").tools)
    return Agent(name=NAME, system_prompt="Help the customer.", tools=tools)


def narrowed_subject() -> dict[str, Any]:
    parameters = json.loads(json.dumps(get_agent("demo").tool("send_email").parameters))
    parameters["properties"]["subject"]["maxLength"] = 5
    return parameters


@pytest.fixture
def started():
    """The agent as the run starts with it; the registry entry is removed afterwards."""
    register(agent_with())
    yield get_agent(NAME)
    agents.registry._AGENTS.pop(NAME, None)


@pytest.fixture
def approved(started, interrupted_run, personas):
    """A run of the test agent waiting on send_email, which alice has approved: (run, request)."""
    run, approval = interrupted_run(agent=NAME)
    assert approval.tool == "send_email"
    approval_decide(
        approval_id=approval.id,
        reviewer=personas.alice,
        verdict="approve",
        checkpoint_id=str(approval.checkpoint_id),
    )
    return run, approval


def _logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def resumed(run: Run) -> Run:
    run_execute(run_id=run.id, worker="in-process")
    run.refresh_from_db()
    return run


def timeline_texts(run: Run) -> list[tuple[str, str]]:
    return [(entry.text, entry.detail) for entry in run_timeline(run)]


def test_a_run_records_the_definition_it_was_submitted_with(approved, started):
    run, _ = approved
    assert run.definition_sha256 == fingerprint(started)
    assert run.definition_digests["tools"]["send_email"]["parameters"]


def test_a_schema_narrowed_while_the_call_waited_sends_it_back_to_a_human_with_the_reason(
    approved, started, personas, mailoutbox
):
    """The issue's test: the approved subject no longer fits; nothing is sent; a new request
    for the same call says why; an edit that fits runs, and the run records the new definition."""
    run, first = approved
    register(agent_with(parameters=narrowed_subject()), replace=True)

    run = resumed(run)

    assert run.status == RunStatus.INPUT_REQUIRED, run.error
    assert mailoutbox == [] and not SideEffect.objects.filter(run=run).exists()
    again = ApprovalRequest.objects.get(run=run, status="pending")
    assert (again.tool_call_id, again.tool) == (first.tool_call_id, "send_email")
    assert again.checkpoint_id != first.checkpoint_id
    assert again.reason == (
        "The agent's definition changed since this call was decided: the arguments no longer fit the "
        "schema of send_email: subject: 'Your refund' is too long."
    )
    assert first.decisions.get().consumed_at is None  # the decision given under the old one never ran
    page = _logged_in(personas.alice).get(reverse("approval", args=[again.id]))
    assert "the arguments no longer fit the schema of send_email" in page.content.decode()
    assert run.definition_sha256 == fingerprint(started)  # the call is open: not gone on yet

    approval_decide(
        approval_id=again.id,
        reviewer=personas.alice,
        verdict="edit",
        arguments={**again.arguments, "subject": "Hi"},
        checkpoint_id=str(again.checkpoint_id),
    )
    run = resumed(run)

    assert run.status == RunStatus.SUCCEEDED, run.error
    assert [m.subject for m in mailoutbox] == ["Hi"]
    assert run.definition_sha256 == fingerprint(get_agent(NAME))
    assert (
        "Run definition changed",
        "the agent's definition changed since this run started: the schema of send_email changed",
    ) in timeline_texts(run)
    assert audit_verify() == (True, None)


def test_a_change_that_does_not_touch_the_call_lets_the_run_go_on_and_the_timeline_says_so(
    approved, personas, mailoutbox
):
    run, _ = approved
    demo = get_agent("demo")
    tools = tuple(
        replace(t, description="Find a customer by email address.") if t.name == "lookup_customer" else t
        for t in demo.tools
    )
    register(Agent(name=NAME, system_prompt="Help the customer.", tools=tools), replace=True)

    run = resumed(run)

    assert run.status == RunStatus.SUCCEEDED, run.error
    assert len(mailoutbox) == 1
    assert run.definition_sha256 == fingerprint(get_agent(NAME))
    assert (
        "Run definition changed",
        "the agent's definition changed since this run started: the description of lookup_customer changed",
    ) in timeline_texts(run)
    changed = AuditEvent.objects.get(action="run.definition_changed", subject_id=str(run.id))
    assert changed.data["changes"] == ["the description of lookup_customer changed"]


def test_a_tool_removed_while_the_call_waited_fails_it_with_an_error_the_model_reads(approved, mailoutbox):
    run, approval = approved
    demo = get_agent("demo")
    register(
        Agent(
            name=NAME,
            system_prompt="Help the customer.",
            tools=tuple(t for t in demo.tools if t.name != "send_email"),
        ),
        replace=True,
    )

    run = resumed(run)

    assert run.status == RunStatus.SUCCEEDED, run.error  # the model read the error and answered
    error = "send_email no longer exists in this agent's definition"
    result = Message.objects.get(run=run, role="tool", body__tool_call_id=approval.tool_call_id)
    assert json.loads(result.body["content"]) == {"error": error}
    assert mailoutbox == [] and not SideEffect.objects.filter(run=run).exists()
    texts = timeline_texts(run)
    assert ("Run call failed", f"{approval.tool_call_id}: {error}") in texts
    assert (
        "Run definition changed",
        "the agent's definition changed since this run started: send_email no longer exists",
    ) in texts


def test_routing_that_now_names_a_group_the_decider_is_not_in_sends_the_call_back(
    approved, personas, mailoutbox
):
    run, _ = approved
    finance = Group.objects.create(name="finance")
    personas.bob.groups.add(finance)
    register(agent_with(routing=(Route(to=("group:finance",)),)), replace=True)

    run = resumed(run)

    assert run.status == RunStatus.INPUT_REQUIRED, run.error
    assert mailoutbox == []
    again = ApprovalRequest.objects.get(run=run, status="pending")
    assert again.assignees == ["group:finance"]
    assert again.reason.endswith("send_email is now routed to group:finance; alice is not among them.")
    approval_decide(
        approval_id=again.id, reviewer=personas.bob, verdict="approve", checkpoint_id=str(again.checkpoint_id)
    )
    run = resumed(run)
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert len(mailoutbox) == 1


def test_a_quorum_raised_while_one_approval_waited_asks_for_the_whole_quorum(approved, personas, mailoutbox):
    """Where the gate would have refused one approval of a quorum-2 call (and failed the run),
    the call goes back to humans: a new request asks for two."""
    run, _ = approved
    register(agent_with(quorum=Quorum(approvals=2)), replace=True)

    run = resumed(run)

    assert run.status == RunStatus.INPUT_REQUIRED, run.error
    assert mailoutbox == []
    again = ApprovalRequest.objects.get(run=run, status="pending")
    assert again.required_approvals == 2
    assert again.reason.endswith(
        "send_email now needs approvals from 2 different reviewers; this call has 1."
    )
    for reviewer in (personas.alice, personas.bob):
        approval_decide(
            approval_id=again.id, reviewer=reviewer, verdict="approve", checkpoint_id=str(again.checkpoint_id)
        )
    run = resumed(run)
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert len(mailoutbox) == 1


def test_a_routing_change_that_still_names_the_decider_lets_the_call_run(approved, personas, mailoutbox):
    run, _ = approved
    register(agent_with(routing=(Route(to=("alice", "bob")),)), replace=True)
    run = resumed(run)
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert len(mailoutbox) == 1


def test_a_run_from_before_definitions_were_recorded_checks_its_call(approved, mailoutbox):
    """No fingerprint: unknown, so the call is checked (it holds) and the run records one."""
    run, _ = approved
    Run.objects.filter(pk=run.pk).update(definition_sha256="", definition_digests={})
    run = resumed(run)
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert run.definition_sha256 == fingerprint(get_agent(NAME))
    assert (
        "Run definition changed",
        "the agent's definition changed since this run started: this run started before definitions were recorded",
    ) in timeline_texts(run)
