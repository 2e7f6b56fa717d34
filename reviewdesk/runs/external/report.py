"""What an external run's framework reports: `POST /api/v1/runs/{id}/report`.

`tool.finished` settles a consumed call's ledger row: a compare-and-set on `pending`, so a late
report never overwrites what a reviewer recorded for an `unknown` one. `run.finished` ends the
run, cancelling what still waits. Each event is audited: the run page's timeline shows them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from reviewdesk.approvals.lifecycle.raising import approvals_cancel_open
from reviewdesk.audit.services import audit_record
from reviewdesk.lib.db import atomic_appends_last
from reviewdesk.lib.errors import Conflict, NotFound
from reviewdesk.runs.access import run_get_visible
from reviewdesk.runs.external.consume import ledger_key
from reviewdesk.runs.models import ENDED, EffectStatus, ErrorKind, Run, RunStatus, SideEffect
from reviewdesk.runs.retention import checkpoints_prune
from reviewdesk.runs.transitions import run_emit_updated

if TYPE_CHECKING:
    from django.contrib.auth.models import User

TOOL_STATUSES = ("confirmed", "failed", "refused")
RUN_STATUSES = ("succeeded", "failed", "cancelled")


@dataclass(frozen=True)
class Reported:
    """The run after the report, and what each `tool.finished` did to its ledger row:
    "confirmed", or "unchanged" (no pending row: never consumed, a rejection, or settled)."""

    run: Run
    ledger: list[dict[str, str]]


def external_report(*, run_id: Any, user: User, events: list[dict[str, Any]]) -> Reported:
    """Apply the events in order, in one transaction: 404 unless `user` submitted the run, 409
    `not_external` for a desk run, 409 `ended` for anything reported after the run ended."""
    visible = run_get_visible(run_id=run_id, user=user)
    with atomic_appends_last():
        run = Run.objects.select_for_update().select_related("submitted_by").get(pk=visible.pk)
        if run.submitted_by_id != user.pk:
            raise NotFound("no such run")
        if not run.is_external:
            raise Conflict("this is a desk run: its workers report it", code="not_external")
        ledger = []
        for event in events:
            if run.status in ENDED:
                raise Conflict(f"the run has already ended ({run.status})", code="ended")
            if event["type"] == "tool.finished":
                ledger.append(_tool_finished(run, user, event))
            else:
                _run_finished(run, user, event)
    return Reported(run=run, ledger=ledger)


def _tool_finished(run: Run, user: User, event: dict[str, Any]) -> dict[str, str]:
    status, summary, call_id = event["status"], event.get("summary", ""), event["tool_call_id"]
    # The row's result says how the call ended (SideEffect.outcome reads it): the tool's own
    # failure, or the framework's guard refusing to run it, are failures of the call.
    result: dict[str, Any] = {"reported": status, "summary": summary}
    if status != "confirmed":
        result["outcome"] = "failed"
    settled = SideEffect.objects.filter(
        run=run, idempotency_key=ledger_key(run, call_id), status=EffectStatus.PENDING
    ).update(status=EffectStatus.CONFIRMED, result=result, updated_at=timezone.now())
    audit_record(
        actor=user,
        action="tool.finished",
        subject_type="run",
        subject_id=run.pk,
        data={
            "tool_call_id": call_id,
            "status": status,
            "summary": summary,
            "ledger_confirmed": bool(settled),
        },
    )
    return {"tool_call_id": call_id, "ledger": "confirmed" if settled else "unchanged"}


def _run_finished(run: Run, user: User, event: dict[str, Any]) -> None:
    status, output = event["status"], event.get("output", "")
    run.status = status
    if status == RunStatus.SUCCEEDED:
        run.output = output
    elif status == RunStatus.FAILED:
        run.error = output or "failed in its framework"
    else:
        run.error, run.error_kind = (
            f"cancelled by its framework{': ' + output if output else ''}",
            ErrorKind.CANCELLED,
        )
    run.revision += 1
    run.save(update_fields=["status", "output", "error", "error_kind", "revision", "updated_at"])
    approvals_cancel_open(run=run, why=f"the run {status} in its framework")
    checkpoints_prune(run)
    audit_record(
        actor=user,
        action="run.finished",
        subject_type="run",
        subject_id=run.pk,
        data={"status": status, "output": output},
    )
    run_emit_updated(run)
