"""POST /api/v1/approvals/{id}/consume and /api/v1/runs/{id}/report: a decision authorises one
execution, its ledger row opens with the consume and the framework's report confirms it."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from reviewdesk.approvals.models import Decision
from reviewdesk.audit.models import AuditEvent
from reviewdesk.runs.models import Run, SideEffect
from tests.reviewdesk.external.conftest import call, submit_body

pytestmark = pytest.mark.django_db


@pytest.fixture
def decided(submitted, decide_api):
    """(verdict="approve", body=None) → (submit response, approval id, decision body)."""

    def make(verdict: str = "approve", body=None, **decision):
        data, approval_id = submitted(body)
        response = decide_api(approval_id, verdict, **decision)
        assert response.status_code == 201, response.json()
        return data, approval_id, response.json()

    return make


@pytest.fixture
def carol(api_as, personas):
    return api_as(personas.carol, "submit")


def consume(client, approval_id, decision):
    return client.post(
        f"/api/v1/approvals/{approval_id}/consume",
        {"decision_id": decision["id"], "nonce": decision["payload"]["nonce"]},
        format="json",
    )


def report(client, run_id, *events):
    return client.post(f"/api/v1/runs/{run_id}/report", {"events": list(events)}, format="json")


def test_a_consume_opens_the_ledger_row_and_a_second_is_409_consumed(decided, carol):
    data, approval_id, decision = decided()
    first = consume(carol, approval_id, decision)
    assert first.status_code == 200, first.json()
    assert first.json()["consumed_at"]
    effect = SideEffect.objects.get(run_id=data["run"]["id"])
    assert (effect.status, effect.tool_call_id, effect.tool) == ("pending", "call_1", "refund_payment")
    assert effect.idempotency_key == f"{data['run']['id']}:call_1"
    assert str(effect.decision_id) == decision["id"]
    again = consume(carol, approval_id, decision)
    assert again.status_code == 409 and again.json()["code"] == "consumed"
    assert SideEffect.objects.count() == 1
    assert AuditEvent.objects.filter(action="decision.consumed").count() == 1


def test_a_rejection_is_consumed_once_with_no_ledger_row(decided, carol):
    _, approval_id, decision = decided("reject", reason="no")
    assert consume(carol, approval_id, decision).status_code == 200
    assert consume(carol, approval_id, decision).status_code == 409
    assert not SideEffect.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_two_consumes_at_once_one_wins_and_one_is_409(decided, api_as, personas):
    """Two threads, each its own connection (on PostgreSQL, two sessions racing for the row)."""
    _, approval_id, decision = decided()
    barrier = threading.Barrier(2)
    statuses: list[int] = []

    def race() -> None:
        client = api_as(personas.carol, "submit")
        barrier.wait()
        try:
            statuses.append(consume(client, approval_id, decision).status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=race) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(statuses) == [200, 409]
    assert SideEffect.objects.count() == 1


def test_a_decision_past_its_not_after_is_410_and_stays_unconsumed(decided, carol):
    _, approval_id, decision = decided()
    Decision.objects.filter(pk=decision["id"]).update(not_after=timezone.now() - timedelta(seconds=1))
    response = consume(carol, approval_id, decision)
    assert response.status_code == 410 and response.json()["code"] == "expired"
    assert Decision.objects.get(pk=decision["id"]).consumed_at is None
    assert not SideEffect.objects.exists()


def test_anyone_but_the_submitter_is_404(decided, api_as, personas):
    from django.contrib.auth.models import Group

    _, approval_id, decision = decided()
    dave = personas.carol.__class__.objects.create_user("dave")
    dave.groups.add(Group.objects.get(name="submitters"))
    for client in (
        api_as(dave, "submit"),
        api_as(personas.alice, "submit"),
        api_as(personas.admin, "submit"),
    ):
        assert consume(client, approval_id, decision).status_code == 404
    assert Decision.objects.get(pk=decision["id"]).consumed_at is None


def test_ids_that_are_not_the_settling_decisions_are_422(decided, carol):
    _, approval_id, decision = decided()
    wrong_nonce = carol.post(
        f"/api/v1/approvals/{approval_id}/consume",
        {"decision_id": decision["id"], "nonce": "0" * 32},
        format="json",
    )
    assert wrong_nonce.status_code == 422
    assert Decision.objects.get(pk=decision["id"]).consumed_at is None


def test_a_pending_call_has_nothing_to_consume(submitted, carol):
    _, approval_id = submitted()
    response = carol.post(
        f"/api/v1/approvals/{approval_id}/consume",
        {"decision_id": "00000000-0000-0000-0000-000000000000", "nonce": "n"},
        format="json",
    )
    assert response.status_code == 422


def test_a_desk_runs_decision_is_never_consumed_through_the_api(
    interrupted_run, personas, api_as, decide_api
):
    _, approval = interrupted_run()
    decision = decide_api(str(approval.id)).json()
    response = consume(api_as(personas.carol, "submit"), str(approval.id), decision)
    assert response.status_code == 409 and response.json()["code"] == "not_external"
    assert Decision.objects.get(pk=decision["id"]).consumed_at is None


def test_the_report_confirms_the_ledger_row_and_ends_the_run(decided, carol):
    data, approval_id, decision = decided()
    run_id = data["run"]["id"]
    consume(carol, approval_id, decision)
    response = report(
        carol,
        run_id,
        {"type": "tool.finished", "tool_call_id": "call_1", "status": "confirmed", "summary": "refunded"},
        {"type": "run.finished", "status": "succeeded", "output": "Refunded order 1234."},
    )
    assert response.status_code == 200, response.json()
    assert response.json()["ledger"] == [{"tool_call_id": "call_1", "ledger": "confirmed"}]
    assert response.json()["run"]["status"] == "succeeded"
    effect = SideEffect.objects.get(run_id=run_id)
    assert effect.status == "confirmed" and effect.outcome == "succeeded"
    assert effect.result == {"reported": "confirmed", "summary": "refunded"}
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.output) == ("succeeded", "Refunded order 1234.")
    assert AuditEvent.objects.filter(action="tool.finished", subject_id=run_id).count() == 1
    again = report(carol, run_id, {"type": "run.finished", "status": "failed"})
    assert again.status_code == 409 and again.json()["code"] == "ended"


def test_a_failed_tool_is_confirmed_as_failed_and_a_call_never_consumed_stays_unchanged(decided, carol):
    data, approval_id, decision = decided(body=submit_body(call("call_1"), call("call_2")))
    consume(carol, approval_id, decision)
    response = report(
        carol,
        data["run"]["id"],
        {"type": "tool.finished", "tool_call_id": "call_1", "status": "failed", "summary": "card declined"},
        {"type": "tool.finished", "tool_call_id": "call_2", "status": "refused"},
    )
    assert response.json()["ledger"] == [
        {"tool_call_id": "call_1", "ledger": "confirmed"},
        {"tool_call_id": "call_2", "ledger": "unchanged"},
    ]
    assert SideEffect.objects.get(tool_call_id="call_1").outcome == "failed"


def test_a_run_finished_cancels_what_still_waits(submitted, carol):
    from reviewdesk.approvals.models import ApprovalRequest

    data, approval_id = submitted()
    report(carol, data["run"]["id"], {"type": "run.finished", "status": "cancelled", "output": "user left"})
    assert ApprovalRequest.objects.get(pk=approval_id).status == "cancelled"
    assert Run.objects.get(pk=data["run"]["id"]).error_kind == "cancelled"


def test_only_the_submitter_reports_and_only_on_external_runs(decided, api_as, personas, interrupted_run):
    data, _, _ = decided()
    alice = api_as(personas.alice, "submit", "review")
    response = report(alice, data["run"]["id"], {"type": "run.finished", "status": "succeeded"})
    assert response.status_code == 404
    assert Run.objects.get(pk=data["run"]["id"]).status == "running"
    desk_run, _ = interrupted_run()
    mine = report(
        api_as(personas.carol, "submit"), desk_run.id, {"type": "run.finished", "status": "succeeded"}
    )
    assert mine.status_code == 409 and mine.json()["code"] == "not_external"


def test_bad_report_events_are_422(submitted, carol):
    data, _ = submitted()
    run_id = data["run"]["id"]
    assert report(carol, run_id, {"type": "tool.finished", "status": "confirmed"}).status_code == 422
    assert report(carol, run_id, {"type": "run.finished", "status": "confirmed"}).status_code == 422
    assert report(carol, run_id, {"type": "tool.started", "status": "confirmed"}).status_code == 422
    assert Run.objects.get(pk=run_id).status == "input_required"


def test_the_framework_reads_its_calls_and_lists_the_decided_unconsumed(
    submitted, decide_api, carol, api_as, personas
):
    """Crash recovery: ?run=&status=approved,rejected&consumed=false finds the decisions made
    while the framework's process was down; the framework's account reads its own calls only."""
    data, first = submitted(submit_body(call("call_1"), call("call_2"), call("call_3")))
    second, third = data["approvals"][1]["id"], data["approvals"][2]["id"]
    decision = decide_api(first).json()
    decide_api(second, "reject", reason="no")
    consume(carol, first, decision)
    query = f"/api/v1/approvals?run={data['run']['id']}&status=approved,rejected&consumed=false"
    listed = carol.get(query).json()["results"]
    assert [a["id"] for a in listed] == [second]
    everything = {a["id"] for a in carol.get(f"/api/v1/approvals?run={data['run']['id']}").json()["results"]}
    assert everything == {first, second, third}
    assert [a["id"] for a in carol.get("/api/v1/approvals?consumed=true").json()["results"]] == [first]
    assert carol.get(f"/api/v1/approvals/{third}").json()["status"] == "pending"
    assert carol.get("/api/v1/approvals?status=approved,bogus").status_code == 400
    other = api_as(personas.carol.__class__.objects.create_user("dave"), "submit")
    assert other.get(f"/api/v1/approvals/{third}").status_code == 404
    assert other.get("/api/v1/approvals").json()["results"] == []
