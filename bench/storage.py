"""#5 checkpoint storage: what the desk stores for a 200-message run, against the raw
message bytes, through its real write path (DatabaseHost.commit_step, two checkpoints per
model turn as the loop writes them). Also used by tests/bench to hold the line in `make test`."""

from __future__ import annotations

import json
import uuid
from typing import Any

from bench.common import Row


def message_pair(turn: int) -> list[dict[str, Any]]:
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


def host_for(user):
    from reviewdesk.runs.host import DatabaseHost
    from reviewdesk.runs.models import Attempt, Run, RunStatus

    run = Run.objects.create(
        agent="demo",
        input="bench",
        model={"provider": "scripted", "script": []},
        approval_ttl_seconds=60,
        submitted_by=user,
        status=RunStatus.RUNNING,
        lease_epoch=1,
    )
    attempt = Attempt.objects.create(run=run, number=1, lease_epoch=1, expires_at=run.created_at)
    return DatabaseHost(run=run, attempt=attempt)


def grow(host, messages: int):
    """Commit the conversation the way the loop does: two checkpoints per model turn."""
    from agents.state import AgentState, CallState, CallStatus, Step

    state = AgentState(step=Step.MODEL, message_count=2)
    system = [{"role": "system", "content": "bench"}, {"role": "user", "content": "go"}]
    host.commit_step(checkpoint_id=str(uuid.uuid4()), state=state, new_messages=system, raise_approvals=[])
    host.write_unsaved()  # written as the loop's next write does (host.py)
    turn = 0
    while state.message_count < messages:
        assistant, result = message_pair(turn)
        state.message_count += 1
        state.model_calls += 1
        state.step = Step.TOOLS
        # The call as the loop records it: the same id, name and arguments as the log's message,
        # which the state knows the batch came from (the checkpoint refers to it, since v6).
        arguments = json.loads(assistant["tool_calls"][0]["function"]["arguments"])
        state.batch = [
            CallState(
                id=f"call_{turn}_0", name="lookup_customer", arguments=arguments, status=CallStatus.READY
            )
        ]
        state.batch_message = assistant
        host.commit_step(
            checkpoint_id=str(uuid.uuid4()), state=state, new_messages=[assistant], raise_approvals=[]
        )
        host.write_unsaved()  # written as the loop's next write does (host.py)
        state.message_count += 1
        state.step, state.batch = Step.MODEL, []
        host.commit_step(
            checkpoint_id=str(uuid.uuid4()), state=state, new_messages=[result], raise_approvals=[]
        )
        host.write_unsaved()  # written as the loop's next write does (host.py)
        turn += 1
    return state


def stored_bytes(run) -> tuple[int, int]:
    """(message log bytes, checkpoint bytes) as the database stores them."""
    from django.db import connection

    from reviewdesk.runs.models import Checkpoint, Message

    size = "pg_column_size" if connection.vendor == "postgresql" else "length"
    key = run.pk.hex if connection.vendor == "sqlite" else run.pk
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT COALESCE(SUM({size}(body)), 0) FROM {Message._meta.db_table} WHERE run_id = %s", [key]
        )
        messages = cursor.fetchone()[0]
        cursor.execute(
            f"SELECT COALESCE(SUM({size}(snapshot)), 0) FROM {Checkpoint._meta.db_table} WHERE run_id = %s",
            [key],
        )
        checkpoints = cursor.fetchone()[0]
    return int(messages), int(checkpoints)


def footprint(user, messages: int) -> dict[str, Any]:
    """Grow a run to `messages` and say what it holds against the raw message bytes."""
    host = host_for(user)
    grow(host, messages)
    raw = sum(len(json.dumps(m.body)) for m in host.run.messages.all())
    log, checkpoints = stored_bytes(host.run)
    sizes = [len(json.dumps(c.snapshot)) for c in host.run.checkpoints.order_by("number")]
    return {
        "messages": messages,
        "raw": raw,
        "log": log,
        "checkpoints": checkpoints,
        "checkpoint_count": len(sizes),
        "stored": log + checkpoints,
        "ratio": (log + checkpoints) / raw,
        "first_checkpoint": sizes[0],
        "last_checkpoint": sizes[-1],
    }


async def measure(stack, people, redis, budget: float) -> list[Row]:
    small, full = footprint(people.carol, 100), footprint(people.carol, 200)
    return [
        Row(
            "5",
            "checkpoint storage, 200-message run",
            "B",
            [full["stored"]],
            floor="raw message bytes",
            floor_samples=[full["raw"]],
            max_ratio=1.5,
            target="≤ 1.5x raw",
            extra={"200": full, "100": small, "growth_200_vs_100": full["stored"] / small["stored"]},
        )
    ]
