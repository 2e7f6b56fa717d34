"""What the turn loop needs, implemented on the database for one attempt of one run.

Every write is fenced: it happens in a transaction that first locks the run
row and checks that this attempt's lease epoch and the run's cancel epoch are
still current. A worker that lost its lease (it stalled, or the run was
cancelled) gets `LeaseLost` instead of writing.
"""

from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agents.canonical import sha256_hex
from agents.gate import ApprovalGate, CallBinding, LedgerEntry, SignedDecision
from agents.loop import DecisionState, Reconciled, Rejected
from agents.state import AgentState, CallState, CallStatus
from agents.tools import ToolContext
from reviewdesk import faults
from reviewdesk.approvals.models import ApprovalKind, ApprovalRequest, ApprovalStatus, Decision, Verdict
from reviewdesk.approvals.selectors import reviewer_may_decide_run
from reviewdesk.approvals.signing import FileKeyring
from reviewdesk.audit.services import audit_record
from reviewdesk.demo.world import DjangoDemoWorld
from reviewdesk.events.builders import approval_data
from reviewdesk.events.services import event_emit
from reviewdesk.runs.models import Attempt, Message, Run, RunStatus, SideEffect
from reviewdesk.runs.selectors import run_audience
from reviewdesk.runs.stores import DatabaseCheckpointStore

logger = logging.getLogger(__name__)


class LeaseLost(Exception):
    """This attempt no longer owns the run; its write was rejected."""


class DatabaseHost:
    def __init__(self, *, run: Run, attempt: Attempt) -> None:
        self.run = run
        self.attempt = attempt
        self.run_id = str(run.id)
        self.run_input = run.input
        # A retry from an earlier checkpoint starts a new branch: its call ids never reuse old ones.
        self.call_id_prefix = f"call_b{run.branch}" if run.branch else "call"
        self.checkpoints = DatabaseCheckpointStore(attempt_id=attempt.id, branch=run.branch)
        self.ledger = DatabaseLedger(host=self)
        self.lease_lost: threading.Event = threading.Event()  # set by the LeaseKeeper
        self.gate = ApprovalGate(
            keyring=FileKeyring(), ledger=self.ledger, reviewer_allowed=reviewer_may_decide_run
        )

    def check_lease(self) -> None:
        """Stop early once the heartbeat found the lease gone (cancelled, or taken over)."""
        if self.lease_lost.is_set() and not faults.fencing_disabled():
            raise LeaseLost(f"attempt {self.attempt.number} of run {self.run.pk} lost its lease")

    def fenced_run(self) -> Run:
        """Lock the run row and check this attempt still owns it. Call inside atomic()."""
        self.check_lease()
        run = Run.objects.select_for_update().get(pk=self.run.pk)
        if faults.fencing_disabled():
            return run
        if (
            run.status != RunStatus.RUNNING
            or run.lease_epoch != self.attempt.lease_epoch
            or run.cancel_epoch != self.run.cancel_epoch
        ):
            raise LeaseLost(
                f"attempt {self.attempt.number} of run {run.id} lost its lease "
                f"(status {run.status}, lease epoch {run.lease_epoch} vs {self.attempt.lease_epoch})"
            )
        return run

    # --- the loop's interface -------------------------------------------------
    def load(self) -> AgentState | None:
        checkpoint = self.checkpoints.latest(self.run_id)
        return AgentState.from_snapshot(checkpoint.snapshot) if checkpoint else None

    def messages(self, count: int) -> list[dict[str, Any]]:
        rows = Message.objects.filter(
            run_id=self.run.pk, position__lt=count, superseded_at__isnull=True
        ).order_by("position")
        return [row.body for row in rows]

    def commit_step(
        self,
        *,
        checkpoint_id: str,
        state: AgentState,
        new_messages: list[dict[str, Any]],
        raise_approvals: list[CallState],
    ) -> None:
        with transaction.atomic():
            run = self.fenced_run()
            start = state.message_count - len(new_messages)
            Message.objects.bulk_create(
                Message(run=run, position=start + i, role=m["role"], body=m)
                for i, m in enumerate(new_messages)
            )
            checkpoint = self.checkpoints.put(self.run_id, state.to_snapshot(), checkpoint_id=checkpoint_id)
            faults.point("during_checkpoint_save")
            for call in raise_approvals:
                approval_raise(run=run, attempt=self.attempt, checkpoint_id=checkpoint.id, call=call)

    def decision_for(self, call: CallState) -> DecisionState:
        kind = ApprovalKind.RECONCILE if call.status == CallStatus.UNKNOWN else ApprovalKind.TOOL_CALL
        approval = (  # the latest: a retry may have raised a new one after a cancelled one
            ApprovalRequest.objects.filter(run_id=self.run.pk, tool_call_id=call.id, kind=kind)
            .select_related("decision")
            .order_by("-created_at")
            .first()
        )
        if approval is None or approval.status == ApprovalStatus.PENDING:
            return None
        if kind == ApprovalKind.RECONCILE and approval.status == ApprovalStatus.CANCELLED:
            return None  # nobody answered: it waits (a retry raises a new one), never settles by itself
        if approval.status in (ApprovalStatus.EXPIRED, ApprovalStatus.CANCELLED):
            return Rejected(f"the request was {approval.status} before anyone decided")
        decision = approval.decision
        if approval.status == ApprovalStatus.REJECTED:
            return Rejected(decision.reason or "no reason given")
        if decision.verdict == Verdict.CONFIRM:
            return Reconciled()
        return SignedDecision(
            decision_id=str(decision.id),
            verdict=decision.verdict,
            arguments=decision.arguments,
            payload=decision.payload,
            signature=decision.signature,
            key_id=decision.key_id,
        )

    def reviewer_notes(self, call_ids: list[str]) -> list[str]:
        decisions = (
            Decision.objects.filter(request__run_id=self.run.pk, request__tool_call_id__in=call_ids)
            .exclude(note="")
            .select_related("reviewer", "request")
            .order_by("decided_at")
        )
        return [
            f"[Review Desk] Note from reviewer {d.reviewer.get_username()} on {d.request.tool} "
            f"({d.request.tool_call_id}): {d.note}"
            for d in decisions
        ]

    def tool_context(self, call: CallState) -> ToolContext:
        return ToolContext(
            run_id=self.run_id,
            tool_call_id=call.id,
            idempotency_key=CallBinding(self.run_id, None, call.id, call.name).idempotency_key,
            workdir=settings.DESK_RUNS_DIR / self.run_id,
            world=DjangoDemoWorld(),
        )


def approval_raise(*, run: Run, attempt: Attempt | None, checkpoint_id, call: CallState) -> ApprovalRequest:
    """Create the approval request for a waiting call, audit it and tell the desk. Caller holds the run lock."""
    reconcile = call.status == CallStatus.UNKNOWN
    # A reconciliation is about the effect that actually ran: with an edit, the edited arguments.
    arguments = _arguments_that_ran(run, call) if reconcile else call.arguments
    reason = (
        f"{call.name} was interrupted between the ledger's pending and confirmed: it may or may "
        "not have taken effect. Check, then mark it done with a reference, re-run it, or reject it."
        if reconcile
        else f"{call.name} needs a reviewer's approval under its policy"
    )
    approval = ApprovalRequest.objects.create(
        kind=ApprovalKind.RECONCILE if reconcile else ApprovalKind.TOOL_CALL,
        run=run,
        attempt=attempt,
        checkpoint_id=checkpoint_id,
        tool_call_id=call.id,
        tool=call.name,
        arguments=arguments,
        arguments_sha256=sha256_hex(arguments),
        reason=reason,
        assignees=list(run.reviewers),
        expires_at=timezone.now() + timedelta(seconds=run.approval_ttl_seconds),
    )
    audit_record(
        actor=None,
        action="reconcile.requested" if reconcile else "approval.requested",
        subject_type="approval",
        subject_id=approval.id,
        data={"run": str(run.pk), "tool": call.name, "arguments_sha256": approval.arguments_sha256},
    )
    event_emit(
        type="approval.created", data=approval_data(approval), run_id=run.pk, audience=run_audience(run)
    )
    return approval


def _arguments_that_ran(run: Run, call: CallState) -> dict:
    """The arguments of the last decision that authorised this call (an edit changes them)."""
    decision = (
        Decision.objects.filter(request__run=run, request__tool_call_id=call.id, consumed_at__isnull=False)
        .exclude(verdict__in=[Verdict.REJECT, Verdict.CONFIRM])
        .order_by("-decided_at")
        .first()
    )
    return decision.arguments if decision else call.arguments


class DatabaseLedger:
    """The side-effect ledger on SideEffect rows; every write is fenced by the host."""

    def __init__(self, *, host: DatabaseHost) -> None:
        self.host = host

    @contextmanager
    def atomic(self):
        with transaction.atomic():
            self.host.fenced_run()
            yield

    def entry(self, key: str) -> LedgerEntry | None:
        row = SideEffect.objects.filter(idempotency_key=key).first()
        return LedgerEntry(key=key, status=row.status, result=row.result) if row else None

    def consume(self, decision_id: str) -> bool:
        return (
            Decision.objects.filter(pk=decision_id, consumed_at__isnull=True).update(
                consumed_at=timezone.now()
            )
            == 1
        )

    def record(
        self, key: str, *, binding: CallBinding, status: str, decision_id: str | None, result: Any = None
    ) -> None:
        SideEffect.objects.create(
            run_id=binding.run_id,
            idempotency_key=key,
            tool_call_id=binding.tool_call_id,
            tool=binding.tool,
            status=status,
            decision_id=decision_id,
            result=result,
            attempt=self.host.attempt,
        )
        # Crash points for the fault-injection tests (inert otherwise): just after this commits.
        after = "after_ledger_pending" if status == SideEffect.Status.PENDING else "after_ledger_confirmed"
        transaction.on_commit(lambda: faults.point(after))

    def confirm(self, key: str, *, result: Any) -> None:
        faults.point("after_effect")
        # Not fenced: the effect has happened, and recording that is true whoever owns the run now.
        with transaction.atomic():
            # Only this attempt's pending row: if the lease was lost and a reviewer has since
            # authorised a re-run, that row belongs to the re-run's attempt.
            SideEffect.objects.filter(
                idempotency_key=key, status="pending", attempt=self.host.attempt
            ).update(status="confirmed", result=result, updated_at=timezone.now())
        faults.point("after_ledger_confirmed")

    def reopen(self, key: str) -> None:
        # Fenced: only the attempt that owns the run may start the effect again.
        with self.atomic():
            SideEffect.objects.filter(idempotency_key=key, status="unknown").update(
                status="pending", attempt=self.host.attempt, updated_at=timezone.now()
            )

    def mark_unknown(self, key: str) -> None:
        with self.atomic():
            SideEffect.objects.filter(idempotency_key=key, status="pending").update(
                status="unknown", updated_at=timezone.now()
            )
