"""What the desk answers desk.js (and its batches) when a decision is refused: the reason,
its code and who decided first; and which cards a batch may pick. In-process, on the test database."""

from __future__ import annotations

from django.test import Client

from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.approvals.models import Verdict
from reviewdesk.runs.execution import run_execute
from reviewdesk.runs.models import RunStatus


def post_json(user, approval, verdict: str):
    client = Client()
    client.force_login(user)
    return client.post(
        f"/approvals/{approval.id}/",
        {"verdict": verdict, "checkpoint_id": str(approval.checkpoint_id), "reason": ""},
        HTTP_ACCEPT="application/json",
    )


def test_a_call_decided_first_is_refused_as_decided_by_whom_even_after_its_run_ended(
    interrupted_run, personas
):
    run, approval = interrupted_run()
    approval_decide(
        approval_id=approval.id,
        reviewer=personas.bob,
        verdict=Verdict.APPROVE,
        checkpoint_id=str(approval.checkpoint_id),
    )
    run_execute(run_id=run.id, worker="in-process")
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED  # the run went on and ended on bob's approval
    refused = post_json(personas.alice, approval, Verdict.APPROVE)
    assert refused.status_code == 409
    assert refused.json() == {
        "decided": False,
        "detail": "Not decided: this approval was already approved by bob",
        "code": "decided",
    }


def test_a_refusal_for_another_reason_names_no_one(interrupted_run, personas):
    _, approval = interrupted_run()
    refused = post_json(personas.alice, approval, "maybe")
    assert refused.status_code == 422
    assert refused.json()["decided"] is False and " by " not in refused.json()["detail"]
    assert refused.json()["code"]


def test_only_plain_tool_calls_can_be_picked_for_a_batch(pending, personas):
    """Reconcile items need more than a plain approve: their cards have no batch checkbox."""
    call, reconcile = pending("tool_call"), pending("reconcile")
    client = Client()
    client.force_login(personas.bob)
    html = client.get("/").content.decode()
    cards = {
        chunk.split('data-approval-id="', 1)[1][:36]: chunk
        for chunk in html.split('<li class="card"')[1:]
        if 'data-approval-id="' in chunk.split(">", 1)[0]
    }
    assert 'class="batch-pick"' in cards[str(call.id)] and "pick-run" in cards[str(call.id)]
    assert "batch-pick" not in cards[str(reconcile.id)] and "pick-run" not in cards[str(reconcile.id)]


def test_a_call_rejected_after_a_quorum_vote_names_who_rejected_it_not_who_approved(
    interrupted_run, personas
):
    """execute needs two approvals: alice approved, then bob rejected. A third reviewer's approve
    was refused as "already rejected by alice, bob": every decider was named, and alice had
    approved. The refusal names the decision that settled it."""
    _, approval = interrupted_run(
        [{"tool_calls": [{"name": "execute", "arguments": {"command": "echo hi"}}]}]
    )
    for reviewer, verdict in ((personas.alice, Verdict.APPROVE), (personas.bob, Verdict.REJECT)):
        approval_decide(
            approval_id=approval.id,
            reviewer=reviewer,
            verdict=verdict,
            reason="no" if verdict == Verdict.REJECT else "",
            checkpoint_id=str(approval.checkpoint_id),
        )
    refused = post_json(personas.admin, approval, Verdict.APPROVE)
    assert refused.status_code == 409
    assert refused.json()["detail"] == "Not decided: this approval was already rejected by bob"


def test_a_reconciliation_marked_done_first_names_who_marked_it(pending, personas):
    reconcile = pending("reconcile")
    approval_decide(
        approval_id=reconcile.id,
        reviewer=personas.alice,
        verdict=Verdict.CONFIRM,
        external_ref="ticket 7",
        checkpoint_id=str(reconcile.checkpoint_id),
    )
    refused = post_json(personas.bob, reconcile, Verdict.REJECT)
    assert refused.json()["detail"] == "Not decided: this approval was already approved by alice"


def test_a_quorum_reconciliation_marked_done_after_a_rerun_vote_names_who_marked_it(
    quorum_reconcile, personas
):
    """execute needs two re-run votes: bob voted to re-run, then admin marked it done. The
    refusal names admin, whose confirmation settled it, not bob, whose vote did not."""
    _, reconcile = quorum_reconcile()
    for reviewer, verdict in ((personas.bob, Verdict.RERUN), (personas.admin, Verdict.CONFIRM)):
        approval_decide(
            approval_id=reconcile.id,
            reviewer=reviewer,
            verdict=verdict,
            external_ref="ran by hand" if verdict == Verdict.CONFIRM else "",
            checkpoint_id=str(reconcile.checkpoint_id),
        )
    refused = post_json(personas.alice, reconcile, Verdict.REJECT)
    assert refused.json()["detail"] == "Not decided: this approval was already approved by admin"
