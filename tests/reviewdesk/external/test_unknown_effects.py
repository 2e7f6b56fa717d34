"""A consumed external call never reported: after DESK_EXTERNAL_CONFIRM_SECONDS beat's sweep
marks its ledger row unknown and a reconciliation asks a human, as for a desk run's."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from reviewdesk.approvals.models import ApprovalRequest
from reviewdesk.runs.models import Run, SideEffect
from reviewdesk.runs.sweeper import runs_sweep

pytestmark = pytest.mark.django_db


@pytest.fixture
def consumed(submitted, decide_api, api_as, personas):
    """() → (run id, the consumed call's approval id): approved and consumed, never reported."""

    def make():
        data, approval_id = submitted()
        decision = decide_api(approval_id).json()
        response = api_as(personas.carol, "submit").post(
            f"/api/v1/approvals/{approval_id}/consume",
            {"decision_id": decision["id"], "nonce": decision["payload"]["nonce"]},
            format="json",
        )
        assert response.status_code == 200
        return data["run"]["id"], approval_id

    return make


def age(run_id, seconds: int) -> None:
    SideEffect.objects.filter(run_id=run_id).update(updated_at=timezone.now() - timedelta(seconds=seconds))


def test_a_pending_row_waits_its_delay_then_becomes_unknown_and_asks_a_human(consumed, settings, task_queue):
    settings.DESK_EXTERNAL_CONFIRM_SECONDS = 600
    run_id, _ = consumed()
    age(run_id, 599)
    assert runs_sweep()["unknown"] == 0
    assert SideEffect.objects.get(run_id=run_id).status == "pending"
    age(run_id, 601)
    assert runs_sweep()["unknown"] == 1
    assert SideEffect.objects.get(run_id=run_id).status == "unknown"
    item = ApprovalRequest.objects.get(run_id=run_id, kind="reconcile")
    assert item.status == "pending" and item.verdicts == ["confirm", "reject"]
    assert Run.objects.get(pk=run_id).status == "input_required"
    assert runs_sweep()["unknown"] == 0  # once
    assert task_queue.length() == 0


def test_a_reviewer_marks_it_done_even_after_the_framework_ended_the_run(
    consumed, settings, decide_api, api_as, personas
):
    settings.DESK_EXTERNAL_CONFIRM_SECONDS = 0
    run_id, _ = consumed()
    api_as(personas.carol, "submit").post(
        f"/api/v1/runs/{run_id}/report",
        {"events": [{"type": "run.finished", "status": "succeeded"}]},
        format="json",
    )
    age(run_id, 1)
    runs_sweep()
    item = ApprovalRequest.objects.get(run_id=run_id, kind="reconcile")
    rerun = decide_api(str(item.id), "rerun")
    assert rerun.status_code == 422 and rerun.json()["code"] == "verdict"
    done = decide_api(str(item.id), "confirm", external_ref="refund R-77")
    assert done.status_code == 201, done.json()
    effect = SideEffect.objects.get(run_id=run_id)
    assert effect.status == "confirmed" and effect.external_ref == "refund R-77"
    assert Run.objects.get(pk=run_id).status == "succeeded"


def test_a_report_that_comes_first_keeps_its_confirmation(consumed, settings, api_as, personas):
    settings.DESK_EXTERNAL_CONFIRM_SECONDS = 0
    run_id, _ = consumed()
    api_as(personas.carol, "submit").post(
        f"/api/v1/runs/{run_id}/report",
        {"events": [{"type": "tool.finished", "tool_call_id": "call_1", "status": "confirmed"}]},
        format="json",
    )
    age(run_id, 1)
    assert runs_sweep()["unknown"] == 0
    assert SideEffect.objects.get(run_id=run_id).status == "confirmed"
    assert not ApprovalRequest.objects.filter(run_id=run_id, kind="reconcile").exists()


def test_a_desk_runs_pending_row_is_not_this_sweeps(interrupted_run, settings):
    settings.DESK_EXTERNAL_CONFIRM_SECONDS = 0
    run, approval = interrupted_run()
    SideEffect.objects.create(
        run=run,
        idempotency_key=f"{run.id}:{approval.tool_call_id}",
        tool_call_id=approval.tool_call_id,
        tool="send_email",
        status="pending",
    )
    age(run.id, 10)
    assert runs_sweep()["unknown"] == 0
    assert SideEffect.objects.get(run=run).status == "pending"


def test_a_late_report_leaves_an_unknown_row_to_its_reviewer(consumed, settings, api_as, personas):
    settings.DESK_EXTERNAL_CONFIRM_SECONDS = 0
    run_id, _ = consumed()
    age(run_id, 1)
    runs_sweep()
    late = api_as(personas.carol, "submit").post(
        f"/api/v1/runs/{run_id}/report",
        {"events": [{"type": "tool.finished", "tool_call_id": "call_1", "status": "confirmed"}]},
        format="json",
    )
    assert late.json()["ledger"] == [{"tool_call_id": "call_1", "ledger": "unchanged"}]
    assert SideEffect.objects.get(run_id=run_id).status == "unknown"
