"""A thread's next turn in the runtime: a finished state continued with a follow-up message."""

from __future__ import annotations

import pytest

from agents.loop import Finished, advance
from agents.registry import get_agent
from agents.state import AgentState, SnapshotError, Step
from agents.testing.host import InMemoryHost
from tests.agents.test_loop import RecordingProvider

DEMO = get_agent("demo")


def test_a_follow_up_continues_the_finished_conversation_with_one_more_user_message():
    host = InMemoryHost()
    provider = RecordingProvider([{"content": "First answer."}, {"content": "Second answer."}])
    assert advance(agent=DEMO, provider=provider, host=host) == Finished("First answer.")
    finished = host.load()
    assert finished is not None

    # What the desk does when the submitter posts: the message at the end of the log, then
    # the continued state as the latest checkpoint.
    host.log.append({"role": "user", "content": "And in French?"})
    continued = finished.followed_up()
    host.checkpoints.put(host.run_id, continued.to_snapshot())

    assert advance(agent=DEMO, provider=provider, host=host) == Finished("Second answer.")
    seen = provider.seen[-1]
    assert [m["role"] for m in seen] == ["system", "user", "assistant", "user"]
    assert seen[-1]["content"] == "And in French?"
    assert host.load().model_calls == 2  # the run's limits count across the whole thread


def test_only_a_finished_conversation_takes_a_follow_up():
    with pytest.raises(SnapshotError):
        AgentState(step=Step.TOOLS, message_count=3).followed_up()
