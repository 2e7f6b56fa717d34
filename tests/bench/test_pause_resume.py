"""Figure #4's desk half works (bench/pause_resume.py): its pause stores the call awaiting
approval and raises its request, its resume loads the conversation back and commits the
result. Times are not asserted: `make bench` reports them. LangGraph's half is checked where it
runs, in `make bench` on PostgreSQL (its samples assert the interrupt and the resumed tool
message, its storage the rows it wrote): the suite does not install LangGraph.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from django.db import connection

from bench import pause_resume

pytestmark = [pytest.mark.bench, pytest.mark.django_db]


def test_the_desk_pauses_with_the_call_awaiting_approval_and_resumes_from_it(personas):
    from agents.state import AgentState, CallStatus, Step
    from reviewdesk.approvals.models import ApprovalRequest
    from reviewdesk.runs.models import Run

    host, state = pause_resume.desk_conversation(personas.carol, 20)
    pause_resume.desk_pause(host, state)

    paused = host.checkpoints.latest(host.run_id)
    assert paused.message_count == 21
    assert AgentState.from_snapshot(paused.snapshot).step == Step.TOOLS
    [call] = paused.snapshot["batch"]
    assert call["status"] == CallStatus.AWAITING and call["checkpoint_id"] == paused.id
    [request] = ApprovalRequest.objects.filter(run=host.run)
    assert (request.tool, request.tool_call_id, str(request.checkpoint_id)) == (
        "send_email",
        call["id"],
        paused.id,
    )

    times = pause_resume.desk_resume(Run.objects.get(pk=host.run.pk), host.attempt)
    assert set(times) == {"load", "commit"}
    resumed = host.checkpoints.latest(host.run_id)
    assert resumed.message_count == 22 and AgentState.from_snapshot(resumed.snapshot).step == Step.MODEL
    bodies = list(host.run.messages.order_by("position").values_list("body", flat=True))
    assert bodies == [
        *pause_resume.conversation(20),
        pause_resume.ask(call["id"]),
        pause_resume.answer(call["id"]),
    ]


class Statements:
    """What one part sends: each statement but BEGIN (PostgreSQL's advisory locks counted
    apart), and its commits."""

    def __init__(self) -> None:
        self.sql: list[str] = []
        self.locks = 0
        self.commits = 0

    def __call__(self, execute, sql, params, many, context):
        if "pg_advisory_xact_lock" in sql:
            self.locks += 1
        elif not sql.lstrip().upper().startswith("BEGIN"):
            self.sql.append(sql)
        return execute(sql, params, many, context)

    def __repr__(self) -> str:
        return f"{len(self.sql)} statements, {self.locks} locks, {self.commits} commits:\n" + "\n".join(
            sql[:100] for sql in self.sql
        )


def counted(part) -> Statements:
    seen = Statements()
    commit = connection.commit

    def counted_commit():
        seen.commits += 1
        commit()

    connection.commit = counted_commit
    try:
        with connection.execute_wrapper(seen):
            part()
    finally:
        del connection.commit  # back to the class's method
    return seen


@pytest.mark.django_db(transaction=True)
def test_the_desks_pause_and_resume_keep_their_round_trips(personas):
    """#4's desk half, statement by statement. The pause: the fenced run row (three
    columns, locked), the message, the checkpoint, the request, the writers' lock (PostgreSQL),
    the chain's head with the audit row's id, the audit row, the event; one commit. The
    resume: the checkpoint with its messages, then the fence, the message and the checkpoint
    in one commit. Lower these when you cut; a round trip coming back fails here. A process's
    first audit row also records the plain-row boundary (one read, once): a pause before the
    counted one pays it, so the count holds whichever test runs first."""
    from reviewdesk.runs.models import Run

    pause_resume.desk_pause(*pause_resume.desk_conversation(personas.carol, 20))
    host, state = pause_resume.desk_conversation(personas.carol, 20)
    paused = counted(lambda: pause_resume.desk_pause(host, state))
    run = Run.objects.get(pk=host.run.pk)
    [stored] = run.checkpoints.order_by("-number")[:1]
    assert [set(call) for call in stored.snapshot["batch"]] == [{"id", "status", "checkpoint_id"}]  # v6
    resumed = counted(lambda: pause_resume.desk_resume(run, host.attempt))

    locks = 1 if connection.vendor == "postgresql" else 0
    assert (len(paused.sql), paused.locks, paused.commits) == (7, locks, 1), paused
    assert (len(resumed.sql), resumed.locks, resumed.commits) == (4, 0, 1), resumed


def test_a_desk_sample_times_the_pause_and_the_resume(personas):
    sample = pause_resume.desk_sample(personas.carol, 20)
    assert set(sample) == {"pause", "resume", "load", "commit"}
    assert sample["resume"] == pytest.approx(sample["load"] + sample["commit"])
    assert all(value > 0 for value in sample.values())


def test_without_postgresql_the_figure_says_so_instead_of_failing(personas):
    if connection.vendor == "postgresql":
        pytest.skip("on PostgreSQL the figure is measured (make bench)")
    [row] = asyncio.run(pause_resume.measure(None, SimpleNamespace(carol=personas.carol), None, 1))
    data = row.as_dict()
    assert "not measured: needs PostgreSQL" in data["figure"] and data["met"] is None
