"""An agent package of one's own, on real processes: examples/agent_package is installed into
the suite's environment (`pip install --no-build-isolation -e`, nothing downloaded), DESK_AGENTS names it for daphne and the
Celery worker, and a run of its agent goes through approval to its effect, exactly once.

The figure reported is what a new user waits for: from `pip install -e` to the approved call's
effect on disk, starting the desk included (the scripted model stands in for the model and the
reviewer answers at once, so it is the desk's share of the ten minutes)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reviewdesk.accounts.services import token_create
from tests.e2e.conftest import REPO, get_run, http, start_stack, wait_for_run, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PACKAGE = REPO / "examples" / "agent_package"
DISTRIBUTION = "desk-example-agent"

SCRIPT = [
    {
        "tool_calls": [
            {"name": "read_ticket", "arguments": {"ticket_id": "T-1"}},
            {"name": "tag_ticket", "arguments": {"ticket_id": "T-1", "tag": "billing"}},
            {"name": "send_reply", "arguments": {"ticket_id": "T-1", "body": "Your refund left today."}},
        ]
    },
    {"content": "Replied to T-1."},
]


def pip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, timeout=300)


@pytest.fixture
def pip_install_the_package():
    """Installs the example package as the README says (editable, no downloads), and removes it
    afterwards unless it was installed before. Yields the monotonic time the install began."""
    installed_before = pip("show", "-q", DISTRIBUTION).returncode == 0
    began = time.monotonic()
    done = pip("install", "-q", "--no-build-isolation", "--no-deps", "-e", str(PACKAGE))
    assert done.returncode == 0, done.stdout + done.stderr
    yield began
    if not installed_before:
        pip("uninstall", "-y", "-q", DISTRIBUTION)


def outbox_lines(data: Path, run_id: str) -> list[dict]:
    outbox = data / "outbox.jsonl"
    lines = outbox.read_text().splitlines() if outbox.exists() else []
    return [entry for entry in map(json.loads, lines) if entry["run_id"] == run_id]


def test_a_package_of_ones_own_runs_a_call_through_approval_to_its_effect_once(
    pip_install_the_package, personas, redis_server, tmp_path, report_timing
):
    began = pip_install_the_package
    data = tmp_path / "data"
    stack = start_stack(
        tmp_path,
        env_extra={
            "DESK_AGENTS": "example_agent.agents",
            "EXAMPLE_AGENT_DIR": str(data),
            "DESK_CELERY_QUEUE": f"agent-package-{tmp_path.name}",  # only these processes serve it
        },
    )
    try:
        started = time.monotonic()
        _, carol = token_create(user=personas.carol, scopes=["submit"])
        _, alice = token_create(user=personas.alice, scopes=["review"])
        model = {"provider": "scripted", "script": SCRIPT}
        # The package's agents and only theirs: no demo agent on this desk.
        status, refused = http(
            "POST",
            stack.url + "/api/v1/runs",
            token=carol,
            body={"agent": "demo", "input": "x", "model": model},
        )
        assert status == 422 and "unknown agent 'demo'" in json.dumps(refused), refused
        status, run = http(
            "POST",
            stack.url + "/api/v1/runs",
            token=carol,
            body={"agent": "helpdesk", "input": "Answer T-1.", "model": model},
        )
        assert status == 201, run

        run = wait_for_run(stack, carol, run["id"], "input_required", "failed")
        assert run["status"] == "input_required", (run["error"], stack.logs())
        # The read and the tag ran without a human; the reply waits for one and has not been sent.
        assert [(a["tool"], a["status"]) for a in run["approvals"]] == [("send_reply", "pending")]
        assert outbox_lines(data, run["id"]) == []
        reply = run["approvals"][0]
        status, decision = http(
            "POST",
            f"{stack.url}/api/v1/approvals/{reply['id']}/decision",
            token=alice,
            body={"verdict": "approve", "reason": "right ticket", "checkpoint_id": reply["checkpoint_id"]},
        )
        assert status == 201, decision

        sent = wait_until(
            lambda: outbox_lines(data, run["id"]), timeout=30, what="the approved reply's effect"
        )
        effect_at = time.monotonic()
        run = wait_for_run(stack, carol, run["id"])
        time.sleep(1)  # a second delivery, were there one, would land within this
        final = get_run(stack, carol, run["id"])
    finally:
        stack.stop()

    assert final["status"] == "succeeded", (final["error"], stack.logs())
    assert final["output"] == "Replied to T-1."
    assert sent == [{"ticket_id": "T-1", "body": "Your refund left today.", "run_id": run["id"]}]
    assert outbox_lines(data, run["id"]) == sent  # exactly once
    assert sorted((e["tool"], e["status"]) for e in final["side_effects"]) == [
        ("send_reply", "confirmed"),
        ("tag_ticket", "confirmed"),
    ]
    tags = [json.loads(p.read_text()) for p in data.glob("tag-*.json")]
    assert tags == [{"ticket_id": "T-1", "tag": "billing", "run_id": run["id"]}]

    report_timing(f"agent package: pip install -e -> first approved call's effect: {effect_at - began:.1f} s")
    report_timing(f"agent package: desk started -> first approved call's effect: {effect_at - started:.1f} s")
