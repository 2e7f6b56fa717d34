"""Routing: the tool's rule over the arguments names who decides; four eyes always holds."""

from __future__ import annotations

import pytest

from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.approvals.models import ApprovalStatus
from reviewdesk.audit.models import AuditEvent
from reviewdesk.lib.errors import Forbidden, NotFound
from reviewdesk.runs.execution import run_execute
from reviewdesk.runs.models import RunStatus, SideEffect
from reviewdesk.runs.services import run_submit
from tests.reviewdesk.approvals.conftest import refund_script
from tests.reviewdesk.conftest import decide

pytestmark = pytest.mark.django_db


def test_a_refund_over_1000_is_raised_for_finance_whoever_the_run_named(interrupted_run, personas, dave):
    _, approval = interrupted_run(script=refund_script(1500), reviewers=["alice"])
    assert approval.assignees == ["group:finance"]
    audit = AuditEvent.objects.get(action="approval.requested", subject_id=str(approval.id))
    assert audit.data["assignees"] == ["group:finance"]


def test_a_refund_of_1000_stays_with_the_reviewers_the_run_named(interrupted_run, personas, dave):
    _, approval = interrupted_run(script=refund_script(1000), reviewers=["alice"])
    assert approval.assignees == ["alice"]


def test_only_a_finance_reviewer_may_decide_a_large_refund(interrupted_run, personas, dave):
    _, approval = interrupted_run(script=refund_script(1500))
    with pytest.raises(NotFound):  # alice is not in finance: she does not even see it
        decide(approval, personas.alice)
    decide(approval, dave)
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.APPROVED


def test_the_gate_accepts_a_group_routed_decision_and_the_tool_runs(interrupted_run, personas, dave):
    """The run named alice; the rule sent the refund to finance; dave's signed approval is the
    one the gate checks, against the request's targets, and the refund runs."""
    run, approval = interrupted_run(script=refund_script(1500), reviewers=["alice"])
    decision = decide(approval, dave)
    run_execute(run_id=run.id, worker="in-process")
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
    effect = SideEffect.objects.get(run=run)
    assert effect.decision_id == decision.id


def test_the_submitter_never_decides_even_when_the_route_names_him(personas, sam, dave):
    """sam is in finance and submitted the run: the rule names finance, but not him."""
    run = run_submit(
        submitter=sam,
        agent="demo",
        input="refund",
        model={"provider": "scripted", "script": refund_script(5000)},
    )
    run_execute(run_id=run.id, worker="in-process")
    approval = run.approvals.get()
    assert approval.assignees == ["group:finance"]
    with pytest.raises(Forbidden, match="you submitted this run"):
        decide(approval, sam)
    decide(approval, dave)
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.APPROVED


def test_a_large_refund_is_visible_to_finance_and_admins_only(interrupted_run, personas, dave, api_as):
    _, approval = interrupted_run(script=refund_script(5000))
    for user, status in ((personas.alice, 404), (personas.bob, 404), (dave, 200), (personas.admin, 200)):
        assert api_as(user, "review").get(f"/api/v1/approvals/{approval.id}").status_code == status, user
    body = api_as(dave, "review").get(f"/api/v1/approvals/{approval.id}").json()
    assert body["reviewer"] == {"users": ["dave"], "targets": ["group:finance"], "group": "reviewers"}


def test_an_item_routed_to_nobody_is_pushed_to_admins_only_never_to_everyone(interrupted_run, personas):
    """No one is in finance here: an empty audience would mean every reviewer, so only admins hear it."""
    from reviewdesk.events.models import DeskEvent

    _, approval = interrupted_run(script=refund_script(5000))
    created = DeskEvent.objects.get(type="approval.created", data__id=str(approval.id))
    assert created.audience == [personas.admin.pk]


def test_a_reviewer_a_rule_routed_the_call_to_opens_its_run_and_others_still_cannot(
    interrupted_run, personas, dave, client
):
    """The run named alice; the refund went to finance: dave may decide it, so he may read the
    run it belongs to (page and API). bob, neither named nor in finance, still may not."""
    from reviewdesk.runs.access import run_get_visible

    run, _ = interrupted_run(script=refund_script(1500), reviewers=["alice"])
    assert run_get_visible(run_id=run.id, user=dave) == run
    client.force_login(dave)
    assert client.get(f"/runs/{run.id}/").status_code == 200
    with pytest.raises(NotFound):
        run_get_visible(run_id=run.id, user=personas.bob)


def test_a_run_is_seen_whole_though_its_other_calls_stay_off_the_reviewers_desk(
    interrupted_run, personas, dave, api_as
):
    """docs/deciding.md, "Who sees what": the run named alice and asked two things at once; the refund
    went to finance. dave reads the whole run (both calls, with whom each is assigned to), as
    judging his call needs it, but alice's email is not his to list, open or decide."""
    email = {"to": "ada@example.com", "subject": "Refund", "body": "On its way."}
    script = [
        {
            "tool_calls": [
                {"name": "send_email", "arguments": email},
                {"name": "refund_payment", "arguments": {"order_id": "A-1001", "amount": 1500}},
            ]
        },
        {"content": "Done."},
    ]
    run, _ = interrupted_run(script=script, reviewers=["alice"])
    mail = run.approvals.get(tool="send_email")
    assert mail.assignees == ["alice"]
    client = api_as(dave, "review")

    shown = client.get(f"/api/v1/runs/{run.id}").json()["approvals"]
    assert {a["tool"] for a in shown} == {"send_email", "refund_payment"}
    [mine] = client.get("/api/v1/approvals?status=pending").json()["results"]
    assert mine["tool"] == "refund_payment"
    assert client.get(f"/api/v1/approvals/{mail.id}").status_code == 404
    decided = client.post(
        f"/api/v1/approvals/{mail.id}/decision",
        {"verdict": "approve", "checkpoint_id": str(mail.checkpoint_id)},
        format="json",
    )
    assert decided.status_code == 404


def test_an_edit_may_not_move_a_call_to_where_others_must_decide_it(
    interrupted_run, personas, dave, monkeypatch
):
    """A refund of 150 is anyone's; edited to 5,000 it is finance's (the demo's rule): alice,
    not in finance, is refused that edit (403, nothing decided) and may still make one that
    keeps the call where it was; dave, in finance, may make it."""
    from agents.demo import ORDERS
    from reviewdesk.approvals.models import ApprovalRequest
    from reviewdesk.demo.models import DemoRefund

    monkeypatch.setitem(ORDERS["A-1001"], "amount", "10000.00")  # room for a large refund
    run, approval = interrupted_run(script=refund_script(150))
    assert approval.assignees == []

    def edit(reviewer, amount):
        return approval_decide(
            approval_id=approval.id,
            reviewer=reviewer,
            verdict="edit",
            reason="adjusted",
            arguments={"order_id": "A-1001", "amount": amount},
            checkpoint_id=str(approval.checkpoint_id),
        )

    with pytest.raises(Forbidden, match="group:finance to decide, not you"):
        edit(personas.alice, 5000)
    assert ApprovalRequest.objects.get(pk=approval.pk).status == ApprovalStatus.PENDING
    edit(dave, 5000)
    run_execute(run_id=run.id, worker="test")
    assert list(DemoRefund.objects.values_list("amount", flat=True)) == [5000]


def test_an_edit_that_keeps_the_call_where_it_was_is_anyones_who_may_decide_it(interrupted_run, personas):
    run, approval = interrupted_run(script=refund_script(150))
    approval_decide(
        approval_id=approval.id,
        reviewer=personas.alice,
        verdict="edit",
        reason="a little less",
        arguments={"order_id": "A-1001", "amount": 120},
        checkpoint_id=str(approval.checkpoint_id),
    )
    run_execute(run_id=run.id, worker="test")
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
