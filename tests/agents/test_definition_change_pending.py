"""Review of issue 36's claim that a call with no human "is asked its policy again by the gate,
in the transaction that runs it" (docs/writing-an-agent.md, "Changing an agent while runs
wait"), on the runtime's in-memory host: the worker died while an idempotent call its policy
let run alone was `pending`; the agent is redeployed with that tool's policy now ALWAYS."""

from __future__ import annotations

from typing import Any

import pytest

from agents.loop import Finished, Waiting
from agents.registry import Agent
from agents.state import CallStatus
from agents.tools import ALWAYS, NEVER, Effect, Tool, ToolContext
from tests.agents.test_definition_change import DefinitionRecordingHost, resume

TAGS: list[dict[str, Any]] = []


class WorkerDied(BaseException):
    """The worker was killed while the call was out (nothing in the process catches it)."""


def _tag(arguments: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    TAGS.append(dict(arguments))
    if len(TAGS) == 1:
        raise WorkerDied
    return {"tagged": arguments["tag"]}


def tagging(approval: Any) -> Agent:
    tool = Tool(
        name="tag_ticket",
        description="Tag a ticket (keyed by the call's idempotency key).",
        parameters={"type": "object", "properties": {"tag": {"type": "string"}}, "required": ["tag"]},
        effect=Effect.IDEMPOTENT_EXTERNAL,
        approval=approval,
        func=_tag,
    )
    return Agent(name="tagging", system_prompt="Tag tickets.", tools=(tool,))


SCRIPT = [{"tool_calls": [{"name": "tag_ticket", "arguments": {"tag": "urgent"}}]}, {"content": "Done."}]


def test_a_pending_idempotent_call_is_asked_its_policy_now_in_force_before_it_is_tried_again():
    TAGS.clear()
    started = tagging(NEVER)
    host = DefinitionRecordingHost(started)
    with pytest.raises(WorkerDied):
        resume(host, started, SCRIPT)
    assert [row.status for row in host.ledger.rows.values()] == ["pending"]

    outcome = resume(host, tagging(ALWAYS), SCRIPT)  # redeployed: every tag now needs a human

    assert len(TAGS) == 1, "tried again with no human, though its policy now asks for one"
    assert isinstance(outcome, Waiting)
    assert host.load().batch[0].status == CallStatus.AWAITING


def test_the_humans_approval_then_tries_it_again_under_its_key_once_and_is_consumed():
    """The call the policy now in force sent to a human, approved: it is tried again under the
    same ledger row (the idempotency key the dead worker's try used), once, and the approval
    that let it run is consumed with the adoption, as a first try's would be."""
    TAGS.clear()
    started = tagging(NEVER)
    host = DefinitionRecordingHost(started)
    with pytest.raises(WorkerDied):
        resume(host, started, SCRIPT)
    redeployed = tagging(ALWAYS)
    assert isinstance(resume(host, redeployed, SCRIPT), Waiting)

    call_id = host.load().batch[0].id
    approval = host.approve(call_id)
    outcome = resume(host, redeployed, SCRIPT)

    assert isinstance(outcome, Finished), outcome
    assert TAGS == [{"tag": "urgent"}, {"tag": "urgent"}]  # the dead worker's try, and this one
    assert [(row.status, row.result) for row in host.ledger.rows.values()] == [
        ("confirmed", {"tagged": "urgent"})
    ]
    assert host.ledger.is_consumed(approval.decision_id)
