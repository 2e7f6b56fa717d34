"""Resuming a run: the tool verifies the stored, signed decision before it acts."""

from __future__ import annotations

import base64

import pytest
from django.contrib.auth.models import Group, User

from agents.tools import ToolUnavailable
from reviewdesk.accounts.roles import REVIEWERS
from reviewdesk.approvals import signing
from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.approvals.models import ApprovalRequest, Decision
from reviewdesk.audit.models import AuditEvent
from reviewdesk.audit.verification import audit_verify
from reviewdesk.runs.execution import run_execute
from reviewdesk.runs.models import RunStatus, SideEffect

pytestmark = pytest.mark.django_db


@pytest.fixture
def outbox(mailoutbox):
    """In-process, Django's test runner holds mail in memory (tests/e2e reads the worker's file outbox)."""
    return mailoutbox


@pytest.fixture
def approved_run(interrupted_run, personas):
    run, approval = interrupted_run()
    decision = approval_decide(
        approval_id=approval.id,
        reviewer=personas.alice,
        verdict="approve",
        checkpoint_id=str(approval.checkpoint_id),
    )
    return run, approval, decision


def test_an_approved_call_runs_once_and_the_run_succeeds(approved_run, outbox):
    run, _, decision = approved_run
    sent_before = len(outbox)
    run_execute(run_id=run.id, worker="in-process")
    run.refresh_from_db()
    decision.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert run.output == "Emailed Ada."
    assert decision.consumed_at is not None
    effects = SideEffect.objects.filter(run=run)
    assert [(e.tool, e.status) for e in effects] == [("send_email", "confirmed")]
    assert len(outbox) == sent_before + 1
    assert outbox[-1].to == ["ada@example.com"]


def test_a_duplicate_resume_does_nothing(approved_run, outbox):
    run, _, _ = approved_run
    run_execute(run_id=run.id, worker="first")
    sent = len(outbox)
    assert run_execute(run_id=run.id, worker="duplicate") is None
    assert len(outbox) == sent
    assert SideEffect.objects.filter(run=run).count() == 1


def _tamper_arguments(decision: Decision) -> None:
    decision.arguments = {**decision.arguments, "to": "mallory@example.com"}


def _tamper_payload(field: str, value: str):
    def tamper(decision: Decision) -> None:
        decision.payload = {**decision.payload, field: value}

    return tamper


def _tamper_signature(decision: Decision) -> None:
    raw = bytearray(base64.b64decode(decision.signature))
    raw[0] ^= 0xFF
    decision.signature = base64.b64encode(bytes(raw)).decode()


def _tamper_key_id(decision: Decision) -> None:
    decision.key_id = "ed25519:0000000000000000"


@pytest.mark.parametrize(
    "tamper",
    [
        _tamper_arguments,
        _tamper_payload("run_id", "00000000-0000-0000-0000-000000000000"),
        _tamper_payload("checkpoint_id", "00000000-0000-0000-0000-000000000000"),
        _tamper_payload("arguments_sha256", "0" * 64),
        _tamper_signature,
        _tamper_key_id,
    ],
    ids=["arguments", "run", "checkpoint", "argument hash", "signature", "key id"],
)
def test_a_tampered_decision_is_refused_by_the_tool_and_audited(approved_run, tamper, outbox):
    run, _, decision = approved_run
    tamper(decision)
    decision.save()
    sent_before = len(outbox)

    run_execute(run_id=run.id, worker="in-process")

    run.refresh_from_db()
    decision.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert run.error_kind == "approval"
    assert run.error.startswith("decision refused")
    assert len(outbox) == sent_before
    assert not SideEffect.objects.filter(run=run).exists()
    assert decision.consumed_at is None
    refusal = AuditEvent.objects.get(action="decision.refused", subject_id=str(run.id))
    assert refusal.data["tool_call_id"] == decision.request.tool_call_id
    assert audit_verify() == (True, None)


def test_a_consumed_decision_cannot_be_replayed(approved_run, outbox):
    run, _, decision = approved_run
    Decision.objects.filter(pk=decision.pk).update(consumed_at=decision.decided_at)
    sent_before = len(outbox)
    run_execute(run_id=run.id, worker="in-process")
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert "already been used" in run.error
    assert len(outbox) == sent_before
    assert AuditEvent.objects.filter(action="decision.refused").count() == 1


def test_a_reviewer_removed_from_the_group_no_longer_authorises(approved_run, personas, outbox):
    run, _, _ = approved_run
    personas.alice.groups.clear()
    run_execute(run_id=run.id, worker="in-process")
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert "no longer allowed" in run.error


def test_a_reviewer_reassigned_away_after_deciding_no_longer_authorises(interrupted_run, personas, outbox):
    """The request was for alice, who approved; then it was re-targeted to bob (behind the
    services' back: a hand-over refuses a decided request). When the tool runs, the gate asks
    again whether alice may decide this request: she may not, so nothing is sent."""
    run, approval = interrupted_run(reviewers=["alice"])
    decision = approval_decide(
        approval_id=approval.id,
        reviewer=personas.alice,
        verdict="approve",
        checkpoint_id=str(approval.checkpoint_id),
    )
    ApprovalRequest.objects.filter(pk=approval.pk).update(assignees=["bob"])

    run_execute(run_id=run.id, worker="in-process")

    run.refresh_from_db()
    decision.refresh_from_db()
    assert (run.status, run.error_kind) == (RunStatus.FAILED, "approval")
    assert "no longer allowed" in run.error
    assert outbox == []
    assert not SideEffect.objects.filter(run=run).exists()
    assert decision.consumed_at is None


def test_control_the_reviewer_the_run_is_still_assigned_to_authorises(interrupted_run, personas, outbox):
    run, approval = interrupted_run(reviewers=["alice"])
    approval_decide(
        approval_id=approval.id,
        reviewer=personas.alice,
        verdict="approve",
        checkpoint_id=str(approval.checkpoint_id),
    )
    run_execute(run_id=run.id, worker="in-process")
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert len(outbox) == 1


def test_a_validly_signed_decision_naming_the_runs_submitter_is_refused_by_the_tool(
    approved_run, personas, outbox
):
    """The desk never signs for the submitter (approval_check_decide refuses her), so this
    decision can only come from outside that path: the payload names carol, who submitted
    the run and is also a reviewer, and it carries a good signature. The gate re-checks the
    signer at execution time and refuses; nothing is sent."""
    run, _, decision = approved_run
    personas.carol.groups.add(Group.objects.get(name=REVIEWERS))
    decision.payload = {**decision.payload, "reviewer": personas.carol.get_username()}
    decision.signature = signing.sign(decision.payload)
    decision.save()

    run_execute(run_id=run.id, worker="in-process")

    run.refresh_from_db()
    decision.refresh_from_db()
    assert (run.status, run.error_kind) == (RunStatus.FAILED, "approval")
    assert "no longer allowed" in run.error
    assert outbox == []
    assert not SideEffect.objects.filter(run=run).exists()
    assert decision.consumed_at is None


# --- The reviewer check answered from the rows read with the decision (`make bench` #2) ---------
# The worker reads the request, its decisions, their reviewers and the reviewers' groups once,
# just before the gate, and the gate's reviewer check answers from those rows: once per
# reviewer, and only for that request. The tests above change the world before the resume;
# these check what those rows may and may not answer.


def test_a_reviewer_deactivated_after_deciding_no_longer_authorises(approved_run, personas, outbox):
    run, _, decision = approved_run
    personas.alice.is_active = False
    personas.alice.save(update_fields=["is_active"])

    run_execute(run_id=run.id, worker="in-process")

    run.refresh_from_db()
    decision.refresh_from_db()
    assert (run.status, run.error_kind) == (RunStatus.FAILED, "approval")
    assert "no longer allowed" in run.error
    assert outbox == []
    assert decision.consumed_at is None


def test_a_decision_stored_as_the_submitters_own_is_refused_by_the_tool(approved_run, personas, outbox):
    """As the submitter test above, but the decision row names carol too, so the check is
    answered from the rows read with the decision: carol submitted the run, so she never
    qualifies, even as a reviewer with a good signature."""
    run, _, decision = approved_run
    personas.carol.groups.add(Group.objects.get(name=REVIEWERS))
    decision.reviewer = personas.carol
    decision.payload = {**decision.payload, "reviewer": personas.carol.get_username()}
    decision.signature = signing.sign(decision.payload)
    decision.save()

    run_execute(run_id=run.id, worker="in-process")

    run.refresh_from_db()
    assert (run.status, run.error_kind) == (RunStatus.FAILED, "approval")
    assert "no longer allowed" in run.error
    assert outbox == []


def test_a_decision_signed_for_another_request_is_checked_against_that_request(
    approved_run, personas, outbox
):
    """alice may decide the request her decision was stored with, but its signed payload names
    another request of the run, one routed to bob only. The gate checks the request the
    signature names, whatever the rows read with the decision say about theirs."""
    run, approval, decision = approved_run
    other = ApprovalRequest.objects.get(pk=approval.pk)
    other.pk, other.tool_call_id, other.assignees, other.status = None, "call_other", ["bob"], "cancelled"
    other.save(force_insert=True)
    decision.payload = {**decision.payload, "request_id": str(other.pk)}
    decision.signature = signing.sign(decision.payload)
    decision.save()

    run_execute(run_id=run.id, worker="in-process")

    run.refresh_from_db()
    assert (run.status, run.error_kind) == (RunStatus.FAILED, "approval")
    assert "no longer allowed" in run.error
    assert outbox == []


class RevokingWorld:
    """A mail server that is down on the first try and, meanwhile, alice leaves the reviewers."""

    tries = 0

    def send_email(self, *, to: str, subject: str, body: str, idempotency_key: str) -> str:
        RevokingWorld.tries += 1
        if RevokingWorld.tries == 1:
            User.objects.get(username="alice").groups.clear()
            raise ToolUnavailable("the mail server is down")
        return "<sent@example.com>"


def test_a_retry_in_the_same_task_checks_the_reviewer_again(approved_run, settings):
    """The first try fails transiently and the task tries again a moment later; in between,
    alice lost the reviewer role. The retry's check reads her groups again: nothing is sent."""
    run, _, _ = approved_run
    RevokingWorld.tries = 0
    settings.DESK_TOOL_WORLD = f"{__name__}.RevokingWorld"
    settings.DESK_TOOL_RETRY_BACKOFF_SECONDS = 0.01  # a short wait: retried in the same task

    run_execute(run_id=run.id, worker="in-process")

    run.refresh_from_db()
    assert RevokingWorld.tries == 1
    assert (run.status, run.error_kind) == (RunStatus.FAILED, "approval")
    assert "no longer allowed" in run.error
    assert SideEffect.objects.get(run=run).status == "retrying"


def test_an_edit_with_a_large_number_still_verifies_once_stored(interrupted_run, personas):
    """An edited amount of 1e16 passes every desk check (it is a double RFC 8785 can write) and
    is signed as such; PostgreSQL's jsonb hands it back as the integer 10000000000000000, which
    the canonical JSON refused (beyond 2**53), so the gate failed the run as an internal error."""
    personas.alice.groups.add(Group.objects.get_or_create(name="finance")[0])
    script = [
        {"tool_calls": [{"name": "refund_payment", "arguments": {"order_id": "A-1001", "amount": 150}}]},
        {"content": "Done."},
    ]
    run, approval = interrupted_run(script)
    approval_decide(
        approval_id=approval.id,
        reviewer=personas.alice,
        verdict="edit",
        arguments={"order_id": "A-1001", "amount": 1e16},
        checkpoint_id=str(approval.checkpoint_id),
    )
    run_execute(run_id=run.id, worker="in-process")
    run.refresh_from_db()
    assert run.error_kind != "internal", run.error
    # The gate verified the decision and ran the tool, which refused to refund that much.
    assert "exceeds what is left to refund" in str(run.messages.filter(role="tool").last().body)
