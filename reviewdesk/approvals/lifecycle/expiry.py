"""Expiry: beat expires overdue requests, each in its own transaction under its run's lock, and
the agent's policy says what follows (the model is told and the run goes on, or the run fails).
A reconciliation never expires: an unknown effect waits for a human."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from agents.registry import get_agent
from reviewdesk.approvals.access import approval_audience
from reviewdesk.approvals.lifecycle.raising import approvals_cancel_open
from reviewdesk.approvals.models import ApprovalKind, ApprovalRequest, ApprovalStatus
from reviewdesk.approvals.reads.representation import approval_data
from reviewdesk.audit.services import audit_record
from reviewdesk.events.services import event_emit
from reviewdesk.runs.models import ENDED, ErrorKind, Run, RunStatus
from reviewdesk.runs.transitions import run_external_waiting_update, run_mark_failed, run_requeue


def approvals_expire(*, now: datetime) -> int:
    """Expire overdue requests, each in its own transaction. The agent's policy says what
    follows: by default the model is told the request expired and the run goes on; `fail`
    ends the run. A reconciliation never expires: an unknown effect waits for a human."""
    overdue = ApprovalRequest.objects.filter(status=ApprovalStatus.PENDING, expires_at__lte=now).exclude(
        kind=ApprovalKind.RECONCILE
    )
    expired = 0
    for approval_id, run_id in overdue.values_list("id", "run_id"):
        with transaction.atomic():
            run = Run.objects.select_for_update().get(pk=run_id)
            expired += approval_expire(approval_id=approval_id, run=run)
    return expired


def approval_expire(*, approval_id: Any, run: Run) -> int:
    """Expire one request if it is still pending; 1 if it did. Caller holds the run lock."""
    # Compare-and-set: a decision that won the race keeps its verdict.
    if (
        ApprovalRequest.objects.filter(pk=approval_id, status=ApprovalStatus.PENDING).update(
            status=ApprovalStatus.EXPIRED, updated_at=timezone.now()
        )
        != 1
    ):
        return 0
    approval = ApprovalRequest.objects.get(pk=approval_id)
    audit_record(actor=None, action="approval.expired", subject_type="approval", subject_id=approval.id)
    event_emit(
        type="approval.updated",
        data=approval_data(approval),
        run_id=run.pk,
        audience=approval_audience(approval),
    )
    if run.status in ENDED:
        return 1
    if run.is_external:
        # Its framework hears of the expiry from the event above, and answers the call itself.
        run_external_waiting_update(run)
        return 1
    if get_agent(run.agent).on_approval_expired == "fail":
        run.cancel_epoch += 1  # fences out a worker that may hold the run
        approvals_cancel_open(run=run, why="the run failed")
        run_mark_failed(
            run,
            f"approval for {approval.tool} ({approval.tool_call_id}) expired",
            kind=ErrorKind.APPROVAL_EXPIRED,
        )
    elif run.status == RunStatus.INPUT_REQUIRED:
        run_requeue(run)
    return 1
