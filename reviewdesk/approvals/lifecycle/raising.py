"""Raising a request, cancelling a run's open ones, and raising them again after a refusal.

Expiry is `expiry.py`; deciding is `deciding/`; the reads the worker needs are
`reads/decisions.py`. Every function here expects the caller to hold the run's row lock in
the current transaction (lock order everywhere: run, then approval).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.utils import timezone

from agents.canonical import sha256_hex
from agents.questions import asks_human
from agents.registry import UnknownAgent, get_agent
from agents.routing import Quorum
from agents.state import SCHEMA_VERSION, CallState, CallStatus
from reviewdesk.approvals.access import approval_audience
from reviewdesk.approvals.lifecycle.clock import respond_by_for
from reviewdesk.approvals.lifecycle.provenance import call_provenance
from reviewdesk.approvals.lifecycle.reading import reading_requested
from reviewdesk.approvals.lifecycle.routing import targets_for_call
from reviewdesk.approvals.models import (
    AWAITING_KINDS,
    ApprovalKind,
    ApprovalRequest,
    ApprovalStatus,
    Decision,
    Verdict,
)
from reviewdesk.approvals.reads.representation import approval_data
from reviewdesk.approvals.rows import approval_insert, approval_update, approvals_pending_of
from reviewdesk.audit.services import audit_record
from reviewdesk.events.services import event_emit
from reviewdesk.lib.db import prefetched_as
from reviewdesk.runs.checkpoints import checkpoint_state, snapshot_column
from reviewdesk.runs.models import Attempt, Checkpoint, Run


def approval_raise(
    *,
    run: Run,
    attempt: Attempt | None,
    checkpoint_id: Any,
    call: CallState,
    reason: str | None = None,
    log: list[dict[str, Any]] | None = None,
) -> ApprovalRequest:
    """Create the request for a waiting call, audit it and tell the desk. `reason`: why it is
    asked, when not the default (a call sent back after its agent's definition changed). `log`:
    the run's live messages, when the caller holds them (else provenance reads them)."""
    reconcile = call.status == CallStatus.UNKNOWN
    question = not reconcile and asks_human(get_agent(run.agent).tool(call.name))
    # A reconciliation is about the effect that actually ran: with an edit, the edited arguments.
    arguments = _arguments_that_ran(run, call) if reconcile else call.arguments
    reason = reason or (
        f"{call.name} was interrupted between the ledger's pending and confirmed: it may or may "
        "not have taken effect. Check, then mark it done with a reference, re-run it, or reject it."
        if reconcile
        else "The agent asks a question; your answer becomes its tool result"
        if question
        else f"{call.name} needs a reviewer's approval under its policy"
    )
    now = timezone.now()
    quorum = _quorum_of(run, call.name)
    approval = ApprovalRequest(
        kind=ApprovalKind.RECONCILE
        if reconcile
        else ApprovalKind.QUESTION
        if question
        else ApprovalKind.TOOL_CALL,
        run=run,
        attempt=attempt,
        checkpoint_id=checkpoint_id,
        tool_call_id=call.id,
        tool=call.name,
        arguments=arguments,
        arguments_sha256=sha256_hex(arguments),
        reason=reason,
        # Who must decide, and how many: the tool's routes and quorum. A reconciliation is
        # routed like the call and keeps its quorum: a re-run makes the effect happen again, so
        # it needs as many reviewers' votes (models.QUORUM_VERDICTS; confirming takes one).
        assignees=targets_for_call(run=run, tool_name=call.name, arguments=arguments or {}),
        required_approvals=quorum.approvals,
        quorum_groups=list(quorum.groups),
        expires_at=now + timedelta(seconds=run.approval_ttl_seconds),
        respond_by=None if reconcile else respond_by_for(run, call.name, since=now),
        # A question's arguments are the agent's own words to a reviewer: nothing to trace.
        provenance=None
        if question
        else call_provenance(run, tool_call_id=call.id, tool_name=call.name, arguments=arguments, log=log),
    )
    reading_requested(approval)  # inserted with its reading pending, if it gets one
    approval_insert(approval)
    # A request just created has no votes yet: its event's quorum reads none, as if prefetched
    # (no query, and no SQL compiled for an empty one).
    prefetched_as(approval, "decisions", [])
    return _announced(
        approval,
        run,
        actor=None,
        action="reconcile.requested" if reconcile else "approval.requested",
        data={
            "run": str(run.pk),
            "tool": call.name,
            "arguments_sha256": approval.arguments_sha256,
            "assignees": approval.assignees,
            "required_approvals": approval.required_approvals,
            "provenance_flags": (approval.provenance or {}).get("flags", []),
        },
    )


@dataclass(frozen=True)
class ExternalCall:
    """One gated call an external run's framework submits (runs/external/submit.py checked it):
    its ids, arguments and their hash as the desk computed it, what the framework can do with a
    decision (`verdicts`, the edit `schema`), the texts shown as untrusted, and who decides."""

    tool_call_id: str
    tool: str
    arguments: dict[str, Any]
    arguments_sha256: str
    verdicts: tuple[str, ...]
    schema: dict[str, Any] | None = None
    description: str = ""
    reason: str = ""
    preview: str = ""
    assignees: tuple[str, ...] = ()
    required_approvals: int = 1


def approval_raise_external(
    *,
    run: Run,
    checkpoint_id: Any,
    call: ExternalCall,
    resume_policy: str,
    submitter: Any,
    kind: str = ApprovalKind.TOOL_CALL,
) -> ApprovalRequest:
    """Create the request for an external run's call, audit it (`submitter` asked; None: the
    desk itself, for a reconciliation) and tell the desk, as `approval_raise` does for a desk
    run's. No agent of the desk is asked: the framework's submission says who decides, how many,
    and with what."""
    now = timezone.now()
    reconcile = kind == ApprovalKind.RECONCILE
    approval = ApprovalRequest(
        kind=kind,
        run=run,
        attempt=None,
        checkpoint_id=checkpoint_id,
        tool_call_id=call.tool_call_id,
        tool=call.tool,
        arguments=call.arguments,
        arguments_sha256=call.arguments_sha256,
        reason=call.reason,
        assignees=list(call.assignees),
        required_approvals=call.required_approvals,
        quorum_groups=[],
        expires_at=now + timedelta(seconds=run.approval_ttl_seconds),
        respond_by=None if reconcile else respond_by_for(run, call.tool, since=now),
        verdicts=list(call.verdicts),
        arguments_schema=call.schema,
        description=call.description,
        preview=call.preview,
        resume_policy=resume_policy,
        provenance=call_provenance(
            run, tool_call_id=call.tool_call_id, tool_name=call.tool, arguments=call.arguments
        ),
    )
    approval_insert(approval)
    prefetched_as(approval, "decisions", [])  # just created: no votes to read
    return _announced(
        approval,
        run,
        actor=submitter,
        action="reconcile.requested" if reconcile else "approval.requested",
        data={
            "run": str(run.pk),
            "tool": call.tool,
            "tool_call_id": call.tool_call_id,
            "arguments_sha256": approval.arguments_sha256,
            "assignees": approval.assignees,
            "required_approvals": approval.required_approvals,
            "verdicts": approval.verdicts,
            "external_id": run.external_id,
            "framework": run.framework,
        },
    )


def _announced(
    approval: ApprovalRequest, run: Run, *, actor: Any, action: str, data: dict[str, Any]
) -> ApprovalRequest:
    """A request just raised, audited and pushed (`approval.created`) to whoever may see it."""
    audit_record(actor=actor, action=action, subject_type="approval", subject_id=approval.id, data=data)
    event_emit(
        type="approval.created",
        data=approval_data(approval),
        run_id=run.pk,
        audience=approval_audience(approval),
    )
    return approval


def _quorum_of(run: Run, tool_name: str) -> Quorum:
    try:
        tool = get_agent(run.agent).tool(tool_name)
    except UnknownAgent:
        tool = None
    return tool.quorum if tool is not None else Quorum()


def _arguments_that_ran(run: Run, call: CallState) -> dict[str, Any]:
    """The arguments of the last decision that authorised this call (an edit changes them)."""
    decision = (
        Decision.objects.filter(request__run=run, request__tool_call_id=call.id, consumed_at__isnull=False)
        .exclude(verdict__in=[Verdict.REJECT, Verdict.CONFIRM])
        .order_by("-decided_at")
        .first()
    )
    return dict(decision.arguments) if decision else dict(call.arguments or {})


def approvals_cancel_open(*, run: Run, why: str) -> int:
    """Cancel the run's pending requests; their desk items vanish live."""
    cancelled = 0
    for approval in approvals_pending_of(run):
        approval.status = ApprovalStatus.CANCELLED
        approval_update(approval, ["status", "updated_at"])
        audit_record(
            actor=None,
            action="approval.cancelled",
            subject_type="approval",
            subject_id=approval.id,
            data={"why": why},
        )
        event_emit(
            type="approval.updated",
            data=approval_data(approval),
            run_id=run.pk,
            audience=approval_audience(approval),
        )
        cancelled += 1
    return cancelled


def approvals_reraise_waiting(*, run: Run, refused: bool) -> None:
    """Calls still waiting in the latest checkpoint get a new request when theirs can no
    longer be answered: cancelled, expired, or (after a refusal) an approval the gate refused.
    An unknown effect always gets a reconciliation: it never settles without a human."""
    latest = Checkpoint.objects.filter(run=run).order_by("-number").first()
    if latest is None:
        return
    state = checkpoint_state(latest)  # its calls' names and arguments are in the log (v6)
    to_raise = [call for call in state.batch if _needs_new_request(run, call, refused=refused)]
    if not to_raise:
        return
    for call in to_raise:
        call.checkpoint_id = str(latest.pk)
    latest.snapshot = snapshot_column(state.to_snapshot())
    latest.schema_version = SCHEMA_VERSION  # rewritten by this code, in its version
    latest.save(update_fields=["snapshot", "schema_version"])
    for call in to_raise:
        approval_raise(run=run, attempt=None, checkpoint_id=latest.pk, call=call)


def _needs_new_request(run: Run, call: CallState, *, refused: bool) -> bool:
    if call.status not in (CallStatus.AWAITING, CallStatus.UNKNOWN):
        return False
    kinds = (ApprovalKind.RECONCILE,) if call.status == CallStatus.UNKNOWN else AWAITING_KINDS
    current = (
        ApprovalRequest.objects.filter(run=run, tool_call_id=call.id, kind__in=kinds)
        .prefetch_related("decisions")
        .order_by("-created_at")
        .first()
    )
    if current is None or current.status in (ApprovalStatus.CANCELLED, ApprovalStatus.EXPIRED):
        return True
    decision = current.decision
    return (
        current.status == ApprovalStatus.APPROVED
        and refused
        and decision is not None
        and decision.consumed_at is None
    )
