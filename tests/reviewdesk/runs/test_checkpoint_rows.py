"""Checkpoint rows on the real database (schema v6): what a row stores of a waiting batch,
and that a resume runs what the log and the signed decisions say, or refuses to run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents.state import SCHEMA_VERSION, AgentState, CallStatus, Step
from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.approvals.models import ApprovalRequest, ApprovalStatus
from reviewdesk.lib.errors import Conflict
from reviewdesk.runs.checkpoints import DatabaseCheckpointStore, checkpoint_state, snapshot_of
from reviewdesk.runs.execution import run_execute
from reviewdesk.runs.models import Checkpoint, ErrorKind, Message, RunStatus, SideEffect
from reviewdesk.runs.services import run_cancel, run_retry

pytestmark = pytest.mark.django_db

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "checkpoints"
EMAIL = {"to": "ada@example.com", "subject": "Your refund", "body": "It is on its way."}


def latest(run) -> Checkpoint:
    return Checkpoint.objects.filter(run=run).order_by("-number").first()


def approve(approval, reviewer, verdict: str = "approve", **options):
    return approval_decide(
        approval_id=approval.id,
        reviewer=reviewer,
        verdict=verdict,
        checkpoint_id=str(approval.checkpoint_id),
        **options,
    )


def resume(run):
    run_execute(run_id=run.id, worker="in-process")
    run.refresh_from_db()
    return run


def test_a_waiting_row_holds_each_calls_id_and_state_and_its_count_once(interrupted_run):
    run, approval = interrupted_run()
    row = latest(run)

    assert row.message_count == 3 and row.schema_version == SCHEMA_VERSION
    assert "message_count" not in row.snapshot  # its column holds it
    assert row.snapshot["batch"] == [
        {"id": "call_0_0", "status": "done", "result": row.snapshot["batch"][0]["result"]},
        {"id": "call_0_1", "status": "awaiting_approval", "checkpoint_id": str(approval.checkpoint_id)},
    ]
    stored = DatabaseCheckpointStore().latest(str(run.pk))
    assert stored.snapshot == snapshot_of(row) and stored.snapshot["message_count"] == 3
    state = checkpoint_state(row)
    assert state.step == Step.TOOLS
    assert [(c.id, c.name, c.arguments) for c in state.batch] == [
        ("call_0_0", "lookup_customer", {"email": "ada@example.com"}),
        ("call_0_1", "send_email", EMAIL),
    ]
    assert (approval.tool_call_id, approval.arguments) == ("call_0_1", EMAIL)


def test_an_edited_call_runs_with_the_edited_arguments_under_the_same_ledger_key(
    interrupted_run, personas, mailoutbox
):
    run, approval = interrupted_run()
    edited = {**EMAIL, "subject": "Refund issued (order A-1001)"}
    approve(approval, personas.alice, "edit", arguments=edited, reason="clearer subject")

    assert resume(run).status == RunStatus.SUCCEEDED, run.error

    assert [(m.to, m.subject) for m in mailoutbox] == [(["ada@example.com"], edited["subject"])]
    effect = SideEffect.objects.get(run=run)
    assert (effect.idempotency_key, effect.tool_call_id, effect.status) == (
        f"{run.pk}:call_0_1",
        "call_0_1",
        "confirmed",
    )


def test_a_v5_row_resumes_the_same_and_the_next_row_is_v6(interrupted_run, personas, mailoutbox):
    """A row v5 code wrote (whole calls, the count in its JSON) for the same paused batch."""
    run, approval = interrupted_run()
    row = latest(run)
    state = checkpoint_state(row)
    state.batch_message = None  # v5 wrote each call whole
    v5 = {**state.to_snapshot(), "step": "tools", "schema_version": 5}
    assert set(v5["batch"][1]) == {"id", "name", "arguments", "status", "checkpoint_id"}
    Checkpoint.objects.filter(pk=row.pk).update(snapshot=v5, schema_version=5)
    approve(approval, personas.alice)

    assert resume(run).status == RunStatus.SUCCEEDED, run.error

    assert [m.subject for m in mailoutbox] == [EMAIL["subject"]]
    assert SideEffect.objects.get(run=run).idempotency_key == f"{run.pk}:call_0_1"
    assert set(Checkpoint.objects.filter(run=run).values_list("schema_version", flat=True)) == {5, 6}


def test_the_v5_fixture_loads_from_a_row_whose_log_holds_its_message(interrupted_run):
    run, _ = interrupted_run()
    raw = json.loads((FIXTURES / "v5_batch_one_unknown_one_waiting.json").read_text())
    body = Message.objects.get(run=run, position=2).body
    body["tool_calls"] = [
        {
            "id": call["id"],
            "type": "function",
            "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])},
        }
        for call in raw["batch"]
    ]
    Message.objects.filter(run=run, position=2).update(body=body)
    Checkpoint.objects.filter(pk=latest(run).pk).update(snapshot=raw, schema_version=5)

    state = checkpoint_state(latest(run))

    assert state == AgentState.from_snapshot(raw)
    assert [c.status for c in state.batch] == [CallStatus.DONE, CallStatus.UNKNOWN, CallStatus.AWAITING]


def test_a_log_that_no_longer_matches_the_checkpoint_fails_the_run_and_runs_nothing(
    interrupted_run, personas, mailoutbox
):
    run, approval = interrupted_run()
    body = Message.objects.get(run=run, position=2).body
    body["tool_calls"][1]["id"] = "call_0_9"  # the message now holds another call
    Message.objects.filter(run=run, position=2).update(body=body)
    approve(approval, personas.alice)

    assert resume(run).status == RunStatus.FAILED
    assert run.error_kind == ErrorKind.INTERNAL
    assert mailoutbox == [] and not SideEffect.objects.filter(run=run).exists()

    # Retrying cannot continue from that checkpoint either: a conflict that says so, not a 500.
    with pytest.raises(Conflict, match="cannot continue from its last checkpoint"):
        run_retry(run_id=run.id, user=personas.carol)
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED


def test_a_retry_reads_the_batch_from_the_live_line_of_the_log(interrupted_run, personas, mailoutbox):
    """After a retry from an earlier checkpoint, the position of the new batch's message also
    holds the abandoned line's message: asking again reads the live one."""
    run, _ = interrupted_run()
    first = run.checkpoints.order_by("number").first()
    run_cancel(run_id=run.id, user=personas.carol)
    run_retry(run_id=run.id, user=personas.carol, checkpoint_id=str(first.pk))
    assert resume(run).status == RunStatus.INPUT_REQUIRED, run.error
    assert Message.objects.filter(run=run, position=2).count() == 2  # one set aside, one live
    run_cancel(run_id=run.id, user=personas.carol)

    run_retry(run_id=run.id, user=personas.carol)  # asks again for the waiting call

    fresh = ApprovalRequest.objects.get(run=run, status=ApprovalStatus.PENDING)
    assert (fresh.tool_call_id, fresh.tool, fresh.arguments) == ("call_b1_0_1", "send_email", EMAIL)
    approve(fresh, personas.alice)
    assert resume(run).status == RunStatus.SUCCEEDED, run.error
    assert SideEffect.objects.get(run=run).idempotency_key == f"{run.pk}:call_b1_0_1"
