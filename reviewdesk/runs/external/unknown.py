"""An external call consumed and never reported: after DESK_EXTERNAL_CONFIRM_SECONDS its ledger
row becomes `unknown` and a reconciliation asks a human whether the effect happened, as for a
desk run's call cut between pending and confirmed. Beat's sweep (`runs.sweeper`) runs it.

The framework's process may have died between consume and report, or the tool hung: the desk
cannot know, and never guesses. A reviewer marks the effect done (with a reference) or rejects;
a re-run is not offered, as the framework, not the desk, would have to run it.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction

from reviewdesk.approvals.lifecycle.raising import ExternalCall, approval_raise_external
from reviewdesk.approvals.models import ApprovalKind, ApprovalRequest, Verdict
from reviewdesk.audit.services import audit_record
from reviewdesk.runs.models import EffectStatus, Run, RunKind, SideEffect
from reviewdesk.runs.transitions import run_external_waiting_update

RECONCILE_VERDICTS = (Verdict.CONFIRM, Verdict.REJECT)


def external_effects_unknown(*, now: datetime) -> int:
    """Mark the external ledger rows pending for longer than the delay `unknown`, each in its
    own transaction under its run's lock, and raise their reconciliations; how many were."""
    cutoff = now - timedelta(seconds=settings.DESK_EXTERNAL_CONFIRM_SECONDS)
    overdue = SideEffect.objects.filter(
        run__kind=RunKind.EXTERNAL, status=EffectStatus.PENDING, updated_at__lt=cutoff
    ).values_list("pk", "run_id")
    marked = 0
    for effect_pk, run_id in list(overdue):
        with transaction.atomic():
            run = Run.objects.select_for_update().select_related("submitted_by").get(pk=run_id)
            # Compare-and-set: a report that won the race keeps its confirmation.
            if (
                SideEffect.objects.filter(pk=effect_pk, status=EffectStatus.PENDING).update(
                    status=EffectStatus.UNKNOWN, updated_at=now
                )
                != 1
            ):
                continue
            effect = SideEffect.objects.get(pk=effect_pk)
            audit_record(
                actor=None,
                action="effect.unknown",
                subject_type="run",
                subject_id=run.pk,
                data={
                    "tool_call_id": effect.tool_call_id,
                    "tool": effect.tool,
                    "after_seconds": settings.DESK_EXTERNAL_CONFIRM_SECONDS,
                },
            )
            _reconcile(run, effect)
            run_external_waiting_update(run)
            marked += 1
    return marked


def _reconcile(run: Run, effect: SideEffect) -> None:
    """The reconciliation item: the call as it was approved (its decision's arguments), routed
    as the call was, at the call's checkpoint."""
    call = (
        ApprovalRequest.objects.filter(run=run, tool_call_id=effect.tool_call_id, kind=ApprovalKind.TOOL_CALL)
        .order_by("-created_at")
        .first()
    )
    if call is None:
        return
    arguments = effect.decision.arguments if effect.decision is not None else call.arguments
    approval_raise_external(
        run=run,
        checkpoint_id=call.checkpoint_id,
        call=ExternalCall(
            tool_call_id=call.tool_call_id,
            tool=call.tool,
            arguments=arguments,
            arguments_sha256=effect.decision.arguments_sha256 if effect.decision else call.arguments_sha256,
            verdicts=RECONCILE_VERDICTS,
            reason=(
                f"{call.tool} was consumed by its framework ({run.framework}) and never reported "
                f"within {settings.DESK_EXTERNAL_CONFIRM_SECONDS}s: it may or may not have taken "
                "effect. Check, then mark it done with a reference, or reject it."
            ),
            assignees=tuple(call.assignees),
        ),
        resume_policy="",
        submitter=None,
        kind=ApprovalKind.RECONCILE,
    )
