"""Checkpoint storage and speed, through the desk's real write path (DatabaseHost).

`make test` runs this small and asserts the property that matters (storage
grows linearly with the conversation); `make bench` runs it at full size and
prints the figures. Timings are printed, never asserted: machines are noisy.
"""

from __future__ import annotations

import json
import os
import statistics
import time

import pytest
from django.db import connection

from agents.state import AgentState, CallState, CallStatus, Step
from reviewdesk.runs.host import DatabaseHost
from reviewdesk.runs.models import Attempt, Checkpoint, Message, Run, RunStatus

pytestmark = [pytest.mark.bench, pytest.mark.django_db]

FULL = os.environ.get("DESK_BENCH") == "full"
REPEAT = 200 if FULL else 20


def message_pair(turn: int) -> list[dict]:
    """One model turn and its tool result, about 0.7 KB together: a realistic chat step."""
    call_id = f"call_{turn}_0"
    return [
        {
            "role": "assistant",
            "content": f"Step {turn}: checking the customer's order history before I answer. " * 2,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {
                        "name": "lookup_customer",
                        "arguments": json.dumps({"email": "ada@example.com"}),
                    },
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": call_id,
            "content": json.dumps(
                {"name": "Ada Lovelace", "orders": [{"order_id": "A-1001", "amount": "250.00"}]}
            ),
        },
    ]


def host_for(personas) -> DatabaseHost:
    run = Run.objects.create(
        agent="demo",
        input="bench",
        model={"provider": "scripted", "script": []},
        approval_ttl_seconds=60,
        submitted_by=personas.carol,
        status=RunStatus.RUNNING,
        lease_epoch=1,
    )
    attempt = Attempt.objects.create(run=run, number=1, lease_epoch=1, expires_at=run.created_at)
    return DatabaseHost(run=run, attempt=attempt)


def grow(host: DatabaseHost, messages: int) -> AgentState:
    """Commit the conversation the way the loop does: two checkpoints per model turn."""
    state = AgentState(step=Step.MODEL, message_count=2)
    host.commit_step(
        checkpoint_id=_id(),
        state=state,
        new_messages=[{"role": "system", "content": "bench"}, {"role": "user", "content": "go"}],
        raise_approvals=[],
    )
    turn = 0
    while state.message_count < messages:
        assistant, result = message_pair(turn)
        state.message_count += 1
        state.step = Step.TOOLS
        state.batch = [
            CallState(id=f"call_{turn}_0", name="lookup_customer", arguments={}, status=CallStatus.READY)
        ]
        host.commit_step(checkpoint_id=_id(), state=state, new_messages=[assistant], raise_approvals=[])
        state.message_count += 1
        state.step, state.batch = Step.MODEL, []
        host.commit_step(checkpoint_id=_id(), state=state, new_messages=[result], raise_approvals=[])
        turn += 1
    return state


def _id() -> str:
    import uuid

    return str(uuid.uuid4())


def stored_bytes(run: Run) -> tuple[int, int]:
    """(message log bytes, checkpoint bytes) as the database stores them."""
    size = "pg_column_size" if connection.vendor == "postgresql" else "length"
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT COALESCE(SUM({size}(body)), 0) FROM {Message._meta.db_table} WHERE run_id = %s",
            [run.pk.hex if connection.vendor == "sqlite" else run.pk],
        )
        messages = cursor.fetchone()[0]
        cursor.execute(
            f"SELECT COALESCE(SUM({size}(snapshot)), 0) FROM {Checkpoint._meta.db_table} WHERE run_id = %s",
            [run.pk.hex if connection.vendor == "sqlite" else run.pk],
        )
        checkpoints = cursor.fetchone()[0]
    return int(messages), int(checkpoints)


def timed(fn, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000


def test_checkpoint_storage_grows_linearly_with_the_conversation(personas, report_timing):
    host = host_for(personas)
    grow(host, 200)
    raw = sum(len(json.dumps(m.body)) for m in host.run.messages.all())
    messages, checkpoints = stored_bytes(host.run)
    count = host.run.checkpoints.count()
    # What a store that snapshots the whole conversation at every checkpoint would hold:
    naive = sum(
        len(json.dumps([m.body for m in host.run.messages.filter(position__lt=c.message_count)]))
        for c in host.run.checkpoints.all()
    )
    report_timing(
        f"[{connection.vendor}] 200-message run: raw messages {raw:,} B; store holds {messages + checkpoints:,} B "
        f"(log {messages:,} B + {count} checkpoints {checkpoints:,} B) = {(messages + checkpoints) / raw:.2f}x raw; "
        f"full-conversation snapshots would hold {naive:,} B = {naive / raw:.0f}x raw"
    )
    # Linear: the log holds each message once, and a checkpoint's size does not grow
    # with the conversation (the first and the last are about the same).
    assert messages < 1.5 * raw
    sizes = [len(json.dumps(c.snapshot)) for c in host.run.checkpoints.order_by("number")]
    assert max(sizes) < 2 * sizes[0] + 200
    assert naive > 50 * raw  # the quadratic alternative this design avoids


@pytest.mark.parametrize("size", [20, 200])
def test_save_and_load_times(personas, report_timing, size):
    host = host_for(personas)
    grow(host, size)
    state = host.load()
    assert state.message_count >= size

    def save():
        host.commit_step(checkpoint_id=_id(), state=state, new_messages=[], raise_approvals=[])

    def load():
        loaded = host.load()
        host.messages(loaded.message_count)

    save_ms, load_ms = timed(save, REPEAT), timed(load, REPEAT)
    report_timing(
        f"[{connection.vendor}] {size} messages: save checkpoint {save_ms:.2f} ms, "
        f"load checkpoint + message log {load_ms:.2f} ms (median of {REPEAT})"
    )
