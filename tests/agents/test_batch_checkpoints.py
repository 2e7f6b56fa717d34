"""The call that settles a batch is checkpointed with the batch's tool messages."""

from __future__ import annotations

from agents.failures import DecisionRefused
from agents.loop import Failed, FailureKind, Finished, advance
from agents.providers.scripted import ScriptedProvider
from agents.registry import get_agent
from agents.state import CallStatus, Step
from agents.testing.host import InMemoryHost

DEMO = get_agent("demo")
EMAIL = {"to": "ada@example.com", "subject": "Hi", "body": "x"}
SCRIPT = [{"tool_calls": [{"name": "send_email", "arguments": EMAIL}]}, {"content": "Done."}]


def waiting_host() -> InMemoryHost:
    host = InMemoryHost()
    advance(agent=DEMO, provider=ScriptedProvider(SCRIPT), host=host)
    host.approve("call_0_0")
    return host


def test_a_resume_commits_the_settled_batch_once_with_its_tool_messages_then_the_answer(monkeypatch):
    host = waiting_host()
    commits = []
    commit_step = host.commit_step

    def counted(**kwargs):
        commits.append((kwargs["state"].step, len(kwargs["new_messages"])))
        commit_step(**kwargs)

    monkeypatch.setattr(host, "commit_step", counted)
    outcome = advance(agent=DEMO, provider=ScriptedProvider(SCRIPT), host=host)
    assert outcome == Finished("Done.")
    # No commit of the done call on its own: the tool message carries its result.
    assert commits == [(Step.MODEL, 1), (Step.DONE, 1)]
    assert host.world.emails and len(host.world.emails) == 1


def test_a_refused_note_still_leaves_the_settled_batch_in_a_checkpoint(monkeypatch):
    host = waiting_host()

    def refuse(call_ids):
        raise DecisionRefused("the note does not match what the reviewer signed")

    monkeypatch.setattr(host, "reviewer_notes", refuse)
    outcome = advance(agent=DEMO, provider=ScriptedProvider(SCRIPT), host=host)
    assert isinstance(outcome, Failed) and outcome.kind == FailureKind.APPROVAL
    # A retry from here must not ask a human again about a call that ran: it is done.
    (email,) = host.state().batch
    assert email.status == CallStatus.DONE and email.result is not None
    assert len(host.world.emails) == 1
