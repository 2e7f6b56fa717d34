"""C5: the resumer, started after the decision was made (nothing was listening), finds the
decided, unconsumed approval and calls the handler once; a running resumer picks up a decision
from the stream. Each resumer is a real `python -m reviewdesk_client.resumer` process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from conftest import HERE, wait_until
from support import ARGUMENTS, submit_one

from reviewdesk_client import SQLiteStore


def resumer(desk, store_path: Path, record: Path, *extra: str, handler: str = "record") -> subprocess.Popen:
    env = {
        **os.environ,
        # What the caller's path holds first (the mutation runner's copy of the package), then this one.
        "PYTHONPATH": os.pathsep.join(
            [*filter(None, [os.environ.get("PYTHONPATH")]), str(HERE.parent), str(HERE)]
        ),
        "REVIEWDESK_TOKEN": desk.tokens["svc"],
        "REVIEWDESK_KEYS": json.dumps(desk.keys),
        "RESUMER_RECORD": str(record),
    }
    command = [
        sys.executable, "-m", "reviewdesk_client.resumer", "--desk", desk.url, "--store", str(store_path),
        "--handler", f"resume_handler:{handler}", *extra,
    ]  # fmt: skip
    return subprocess.Popen(
        command, env=env, cwd=store_path.parent, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def lines(record: Path) -> list[dict]:
    return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []


def paused(desk, store_path: Path):
    """The agent's process: submit, keep the arguments in the store, exit (the store is closed)."""
    store = SQLiteStore(store_path)
    with desk.client(store=store) as client:
        ticket = submit_one(client)
        store.put_state(f"arguments:{ticket.approval_id}", json.dumps(ARGUMENTS))
    store.close()
    return ticket


def test_the_resumer_on_start_finds_a_decision_made_while_it_was_down(desk, tmp_path):
    store_path, record = tmp_path / "agent.sqlite3", tmp_path / "ran.jsonl"
    ticket = paused(desk, store_path)
    other = paused(desk, tmp_path / "elsewhere.sqlite3")  # not this store's: never handled here
    desk.decide(ticket.approval_id, "approve")
    desk.decide(other.approval_id, "approve")
    first = resumer(desk, store_path, record, "--once")
    assert first.wait(60) == 0, first.stdout.read()
    assert lines(record) == [{"approval": ticket.approval_id, "verdict": "approve"}]
    # Started again: the decision was consumed, the handler is not called a second time.
    again = resumer(desk, store_path, record, "--once")
    assert again.wait(60) == 0, again.stdout.read()
    assert len(lines(record)) == 1


def test_a_running_resumer_handles_a_decision_from_the_stream_once(desk, tmp_path):
    store_path, record = tmp_path / "agent.sqlite3", tmp_path / "ran.jsonl"
    ticket = paused(desk, store_path)
    running = resumer(desk, store_path, record, "--via", "sse")
    try:
        time.sleep(2)  # it has caught up (nothing to do) and follows the stream
        desk.decide(ticket.approval_id, "reject", reason="no")
        wait_until(lambda: lines(record), timeout=30, what="the resumer's handler")
        time.sleep(2)  # more events of the run (none should make a second call)
    finally:
        running.terminate()
        output = running.communicate(timeout=15)[0]
    assert lines(record) == [{"approval": ticket.approval_id, "verdict": "reject"}], output


def test_a_handled_decision_is_not_handed_over_again_even_unconsumed(desk, tmp_path):
    store_path, record = tmp_path / "agent.sqlite3", tmp_path / "ran.jsonl"
    ticket = paused(desk, store_path)
    desk.decide(ticket.approval_id, "reject", reason="no")
    for _ in range(2):
        run = resumer(desk, store_path, record, "--once", handler="record_only")
        assert run.wait(60) == 0, run.stdout.read()
    assert lines(record) == [{"approval": ticket.approval_id, "verdict": "rejected"}]


def test_a_decision_the_agent_consumed_itself_is_not_handed_over(desk, tmp_path):
    """The agent's process waited inline and consumed the decision; a resumer started later
    replays the run's events from the start and must leave that decision alone."""
    store_path, record = tmp_path / "agent.sqlite3", tmp_path / "ran.jsonl"
    ticket = paused(desk, store_path)
    desk.decide(ticket.approval_id, "approve")
    store = SQLiteStore(store_path)
    with desk.client(store=store) as agent:
        outcome = agent.wait(ticket, 10)
        agent.consume(agent.verify(outcome.decision, ticket, current_arguments=ARGUMENTS))
    store.close()
    # A handler that would note any call: a consumed decision must not reach a handler at all.
    running = resumer(desk, store_path, record, "--via", "sse", handler="record_only")
    try:
        time.sleep(4)  # caught up, and the stream replayed the run's events
    finally:
        running.terminate()
        output = running.communicate(timeout=15)[0]
    assert lines(record) == [], output
