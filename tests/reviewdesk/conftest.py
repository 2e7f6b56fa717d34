from __future__ import annotations

import pytest

from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.approvals.models import ApprovalRequest
from reviewdesk.runs.execution import run_execute
from reviewdesk.runs.models import Run, RunStatus, SideEffect
from reviewdesk.runs.services import run_submit
from tests.conftest import SEND_EMAIL_SCRIPT
from tests.reviewdesk.device_keys import device_keys  # noqa: F401 - a fixture for device-key tests


def decide(approval, reviewer, verdict="approve", **options):
    """`approval_decide` on `approval` at its own checkpoint, as a reviewer's page posts it."""
    return approval_decide(
        approval_id=approval.id,
        reviewer=reviewer,
        verdict=verdict,
        checkpoint_id=str(approval.checkpoint_id),
        **options,
    )


@pytest.fixture
def interrupted_run(personas):
    """A run by carol, advanced in-process until send_email waits for approval.

    The task body runs in this process: these tests are about the services
    and the API, and `tests/e2e` covers the same path through a real worker.
    """

    def make(script=SEND_EMAIL_SCRIPT, agent="demo", **fields) -> tuple[Run, ApprovalRequest]:
        run = run_submit(
            submitter=personas.carol,
            agent=agent,
            input="Tell Ada her refund is on its way.",
            model={"provider": "scripted", "script": script},
            **fields,
        )
        run_execute(run_id=run.id, worker="in-process")
        run.refresh_from_db()
        assert run.status == RunStatus.INPUT_REQUIRED, run.error
        return run, run.approvals.filter(status="pending").order_by("tool_call_id").first()

    return make


@pytest.fixture
def quorum_reconcile(interrupted_run, personas, settings):
    """A reconciliation of the demo's `execute`, which needs two reviewers: alice and bob
    approved the call, its effect was left `pending` by an attempt now past its task's hard time
    limit, and the resume (in-process) raised the reconcile item. () -> (run, the item)."""

    def make() -> tuple[Run, ApprovalRequest]:
        run, approval = interrupted_run(
            script=[
                {"tool_calls": [{"name": "execute", "arguments": {"command": "echo hi"}}]},
                {"content": "Ran it."},
            ]
        )
        for reviewer in (personas.alice, personas.bob):
            decision = approval_decide(
                approval_id=approval.id,
                reviewer=reviewer,
                verdict="approve",
                checkpoint_id=str(approval.checkpoint_id),
            )
        SideEffect.objects.create(
            run=run,
            idempotency_key=f"{run.id}:{approval.tool_call_id}",
            tool_call_id=approval.tool_call_id,
            tool="execute",
            status="pending",
            decision=decision,
        )
        settings.CELERY_TASK_TIME_LIMIT = 0  # the interrupted attempt is past its task's hard limit
        run_execute(run_id=run.id, worker="in-process")
        return run, ApprovalRequest.objects.get(run=run, kind="reconcile", status="pending")

    return make


@pytest.fixture(autouse=True)
def fresh_channel_layer():
    """Each test gets its own channel layer object. An async test runs on a loop of its own,
    and the Redis layer's asyncio locks belong to the loop that first used them: a consumer
    cancelled mid-receive in one test left its lock held, and bound to that test's loop, for
    the next test's socket."""
    from channels.layers import channel_layers

    channel_layers.backends.clear()
    yield
    channel_layers.backends.clear()
