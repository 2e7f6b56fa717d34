"""Review of issue 36's definition re-check, as an attacker would use it (real database, the
task run in-process as tests/reviewdesk/runs/test_definition_change.py does): what a resume under
another definition lets run that no human approved for its current form."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.utils import timezone

import agents.registry
from agents.definition import digests, fingerprint
from agents.registry import Agent, get_agent, register
from agents.routing import Condition, Route
from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.approvals.models import ApprovalRequest
from reviewdesk.runs.execution import run_execute
from reviewdesk.runs.models import AttemptStatus, Run, RunStatus

pytestmark = pytest.mark.django_db

NAME = "review-definition-change"
BOSS = "boss@example.com"


def agent_with(**send_email: Any) -> Agent:
    tools = tuple(replace(t, **send_email) if t.name == "send_email" else t for t in get_agent("demo").tools)
    return Agent(name=NAME, system_prompt="Help the customer.", tools=tools)


@pytest.fixture
def started():
    register(agent_with())
    yield get_agent(NAME)
    agents.registry._AGENTS.pop(NAME, None)


def resumed(run: Run) -> Run:
    run_execute(run_id=run.id, worker="in-process")
    run.refresh_from_db()
    return run


def test_an_edit_then_a_route_for_the_edited_arguments_sends_the_call_back(
    started, interrupted_run, personas, mailoutbox
):
    """A reviewer edits `to` while anyone may decide send_email (allowed: the routing names
    nobody either way). The agent is then redeployed with a route sending mail to BOSS to
    finance, which alice is not in. The recheck must ask the routing about the arguments that
    will run (the edit's), not the model's: otherwise alice's edit reaches BOSS with no finance
    reviewer ever asked, which the same edit made after the redeploy is refused
    (`_check_edit_stays_with`)."""
    run, approval = interrupted_run(agent=NAME)
    assert approval.tool == "send_email" and approval.arguments["to"] != BOSS
    finance = Group.objects.create(name="finance")
    personas.bob.groups.add(finance)
    approval_decide(
        approval_id=approval.id,
        reviewer=personas.alice,
        verdict="edit",
        arguments={**approval.arguments, "to": BOSS},
        checkpoint_id=str(approval.checkpoint_id),
    )
    register(
        agent_with(routing=(Route(to=("group:finance",), when=(Condition("to", "==", BOSS),)),)), replace=True
    )

    run = resumed(run)

    assert [m.to for m in mailoutbox] == [], "alice's edit went to BOSS without finance"
    assert run.status == RunStatus.INPUT_REQUIRED, run.error
    again = ApprovalRequest.objects.get(run=run, status="pending")
    assert again.reason.endswith("alice is not among them.")


def test_a_fingerprint_rewritten_in_the_database_does_not_skip_the_recheck(
    started, interrupted_run, personas, mailoutbox
):
    """A database writer (no key) who sees a redeploy coming writes the new definition's
    fingerprint and digests onto a waiting run: the worker then finds no drift and runs alice's
    approval, given for a subject the narrowed schema refuses. What the recheck compares with
    must be something a writer cannot choose (e.g. the definition's digest in the signed
    decision, or on the request the reviewer decided), not a plain column of the run."""
    run, approval = interrupted_run(agent=NAME)
    approval_decide(
        approval_id=approval.id,
        reviewer=personas.alice,
        verdict="approve",
        checkpoint_id=str(approval.checkpoint_id),
    )
    parameters = json.loads(json.dumps(get_agent("demo").tool("send_email").parameters))
    parameters["properties"]["subject"]["maxLength"] = 5
    narrowed = register(agent_with(parameters=parameters), replace=True)
    Run.objects.filter(pk=run.pk).update(
        definition_sha256=fingerprint(narrowed), definition_digests=digests(narrowed)
    )

    run = resumed(run)

    assert mailoutbox == [], "a call whose arguments no longer fit the schema was sent"
    assert run.status == RunStatus.INPUT_REQUIRED, run.error


def test_an_edit_checked_by_a_web_process_on_the_old_release_is_checked_again_by_the_worker(
    started, interrupted_run, personas, mailoutbox
):
    """A rolling deploy, workers first: the worker runs the narrowed send_email (subject at most
    5 characters) and the run records it; the web process still serves the old, wider one. A
    reviewer edits the subject there to a long one, which the web's schema accepts. The worker
    resumes with the definition the run recorded, finds no drift, and sends it: an edit no
    schema now in force allows, never checked against the one that runs it."""
    parameters = json.loads(json.dumps(get_agent("demo").tool("send_email").parameters))
    parameters["properties"]["subject"]["maxLength"] = 5
    narrowed, wide = agent_with(parameters=parameters), agent_with()
    register(narrowed, replace=True)  # the worker's release, with which the run starts and its call waits
    run, approval = interrupted_run(
        agent=NAME,
        script=[
            {
                "tool_calls": [
                    {
                        "name": "send_email",
                        "arguments": {"to": "ada@example.com", "subject": "Hi", "body": "x"},
                    }
                ]
            },
            {"content": "done"},
        ],
    )
    assert approval.tool == "send_email"

    register(wide, replace=True)  # the web process, still on the old release, checks the edit
    approval_decide(
        approval_id=approval.id,
        reviewer=personas.alice,
        verdict="edit",
        arguments={**approval.arguments, "subject": "A subject far over five characters"},
        checkpoint_id=str(approval.checkpoint_id),
    )
    register(narrowed, replace=True)  # the worker resumes

    run = resumed(run)

    assert mailoutbox == [], "an edit the worker's schema refuses was sent"


def test_a_worker_whose_desk_agents_lacks_the_runs_agent_does_not_end_the_run(
    started, interrupted_run, personas, mailoutbox
):
    """A deploy that adds or moves an agent module reaches the workers one by one: a worker still
    on the old DESK_AGENTS takes the resume of an approved call of an agent it does not load.
    It cannot run it, but nor should it end the run as an internal error (terminal: the approval
    and the run's work are lost); a worker that loads the agent could go on with it."""
    run, approval = interrupted_run(agent=NAME)
    approval_decide(
        approval_id=approval.id,
        reviewer=personas.alice,
        verdict="approve",
        checkpoint_id=str(approval.checkpoint_id),
    )
    agents.registry._AGENTS.pop(NAME)  # this worker's list does not name the agent's module

    run = resumed(run)

    assert mailoutbox == []
    assert run.status != RunStatus.FAILED, run.error


def test_the_run_a_worker_cannot_run_is_queued_again_with_backoff_and_a_worker_that_loads_it_goes_on(
    started, interrupted_run, personas, mailoutbox, settings, caplog
):
    """The worker whose DESK_AGENTS lacks the agent releases the run (its lease cleared, its
    attempt released with the reason, naming the agent and this process's list), queued again
    after the retry backoff, doubled on each such try in a row; a worker that loads the agent
    then runs the approved call, once."""
    settings.DESK_RETRY_BACKOFF_SECONDS = 10
    run, approval = interrupted_run(agent=NAME)
    approval_decide(
        approval_id=approval.id,
        reviewer=personas.alice,
        verdict="approve",
        checkpoint_id=str(approval.checkpoint_id),
    )
    loaded = agents.registry._AGENTS.pop(NAME)
    reason = (
        f"the agent {NAME!r} is not loaded in this process (DESK_AGENTS={','.join(settings.DESK_AGENTS)})"
    )

    waits = []
    for _ in range(2):
        before = timezone.now()
        run = resumed(run)
        assert run.status == RunStatus.QUEUED and run.lease_expires_at is None
        attempt = run.attempts.order_by("-number").first()
        assert (attempt.status, attempt.error) == (AttemptStatus.RELEASED, reason)
        waits.append(round((run.next_attempt_at - before).total_seconds()))
        Run.objects.filter(pk=run.pk).update(next_attempt_at=timezone.now())  # due again now
    assert waits == [10, 20]
    assert reason in caplog.text
    assert mailoutbox == []

    register(loaded)  # a worker whose DESK_AGENTS names the agent's module
    run = resumed(run)

    assert run.status == RunStatus.SUCCEEDED, run.error
    assert len(mailoutbox) == 1
