"""An approval's payload read as a model and read as a page's columns is the same payload.

In-process (the test database, the services called directly). The approvals list builds its
page from `values()` rows (`approvals_page_data`, `make bench` #7b); every other payload is built
from a model (`approval_data`). These tests compare the two, key by key, over approvals in each
of the shapes listed in `every_shape`: what makes each that shape is checked on its own.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.utils import timezone

from reviewdesk.approvals.lifecycle.handover import approval_handover
from reviewdesk.approvals.models import (
    ApprovalRequest,
    ApprovalStatus,
    Decision,
    approving_votes,
    settling_decision,
)
from reviewdesk.approvals.reads.representation import (
    approval_columns,
    approval_data,
    approval_rows,
    approvals_data,
    approvals_page_data,
)
from reviewdesk.runs.models import Run
from tests.reviewdesk.approvals.conftest import EXECUTE_SCRIPT, asking
from tests.reviewdesk.conftest import decide

pytestmark = pytest.mark.django_db


@pytest.fixture
def every_shape(interrupted_run, quorum_reconcile, personas):
    """One approval of each shape, by name: open; assigned to a group and a user; handed over
    with a note, by a reviewer since made inactive; one vote of two; approved by one reviewer,
    edited, by a quorum's second, by two votes at the same instant; rejected; a question
    answered; a reconciliation open, with one re-run vote of two, confirmed with a reference;
    expired; cancelled after one vote of two; on the clock with a long task; raised by an agent
    the desk no longer knows."""
    Group.objects.get_or_create(name="billing")[0].user_set.add(personas.alice, personas.admin)
    shapes = {}
    _, shapes["open"] = interrupted_run()
    _, assigned = interrupted_run()
    ApprovalRequest.objects.filter(pk=assigned.pk).update(assignees=["group:billing", "bob"])
    shapes["assigned"] = assigned
    _, handed = interrupted_run()
    shapes["handed over"] = approval_handover(
        approval_id=handed.id, by=personas.bob, to="group:billing", note="Ada's account: check <b>it</b>"
    )
    reviewer = personas.admin  # bob is made inactive at the end
    _, voted = interrupted_run(script=EXECUTE_SCRIPT)
    decide(voted, personas.alice)
    shapes["one vote of two"] = voted
    _, approved = interrupted_run()
    decide(approved, reviewer, reason="fine", note="say thanks")
    shapes["approved"] = approved
    _, edited = interrupted_run()
    decide(
        edited, personas.alice, verdict="edit", arguments={**edited.arguments, "subject": "Your refund, Ada"}
    )
    shapes["edited"] = edited
    _, quorum = interrupted_run(script=EXECUTE_SCRIPT)
    decide(quorum, reviewer)
    decide(quorum, personas.alice)
    shapes["approved by two"] = quorum
    _, tied = interrupted_run(script=EXECUTE_SCRIPT)
    decide(tied, reviewer)
    decide(tied, personas.alice)
    Decision.objects.filter(request=tied).update(decided_at=timezone.now())
    # Ids against the order cast (admin's vote, then alice's), the first written renumbered first.
    Decision.objects.filter(request=tied, reviewer=reviewer).update(id=uuid.UUID(int=2))
    Decision.objects.filter(request=tied, reviewer=personas.alice).update(id=uuid.UUID(int=1))
    shapes["two votes at one instant"] = tied
    _, rejected = interrupted_run()
    decide(rejected, personas.alice, verdict="reject", reason="wrong person")
    shapes["rejected"] = rejected
    _, question = interrupted_run(asking(question="Which colour?", options=["red", "blue"]))
    decide(question, personas.alice, verdict="answer", answer="blue")
    shapes["question answered"] = question
    _, shapes["reconcile"] = quorum_reconcile()
    _, rerun = quorum_reconcile()
    decide(rerun, reviewer, verdict="rerun")
    shapes["reconcile, one re-run vote"] = rerun
    _, confirmed = quorum_reconcile()
    decide(confirmed, reviewer, verdict="confirm", external_ref="smtp-4711")
    shapes["reconcile confirmed"] = confirmed
    _, expired = interrupted_run()
    ApprovalRequest.objects.filter(pk=expired.pk).update(status=ApprovalStatus.EXPIRED)
    shapes["expired"] = expired
    _, cancelled = interrupted_run(script=EXECUTE_SCRIPT)
    decide(cancelled, personas.alice)
    ApprovalRequest.objects.filter(pk=cancelled.pk).update(status=ApprovalStatus.CANCELLED)
    shapes["cancelled after a vote"] = cancelled
    run, clocked = interrupted_run()
    now = timezone.now()
    ApprovalRequest.objects.filter(pk=clocked.pk).update(
        respond_by=now + timedelta(minutes=30), reminded_at=now, escalation_level=2, reason="over £500"
    )
    Run.objects.filter(pk=run.pk).update(input="x" * 1000)
    shapes["on the clock, long task"] = clocked
    run, unknown = interrupted_run()
    Run.objects.filter(pk=run.pk).update(agent="retired-agent")
    shapes["unknown agent"] = unknown
    personas.bob.is_active = False  # who handed "handed over" on has left since
    personas.bob.save()
    return shapes


def test_each_shape_reads_alike_as_columns_and_as_a_model(every_shape):
    ids = {name: approval.pk for name, approval in every_shape.items()}
    by_id = {row["id"]: row for row in approval_columns(ApprovalRequest.objects.filter(pk__in=ids.values()))}
    from_columns = dict(zip(by_id, approvals_page_data(list(by_id.values())), strict=True))
    for name, pk in ids.items():
        from_model = approval_data(ApprovalRequest.objects.get(pk=pk))
        assert from_columns[pk].keys() == from_model.keys(), name
        for key, value in from_model.items():
            assert from_columns[pk][key] == value, (name, key)


def test_the_shapes_cover_what_a_payload_can_say(every_shape):
    """The comparison above means something only if the shapes differ where payloads can: each
    is checked here for what makes it that shape."""
    data = {name: approval_data(ApprovalRequest.objects.get(pk=a.pk)) for name, a in every_shape.items()}
    assert data["assigned"]["reviewer"] == {
        "users": ["admin", "alice", "bob"],
        "targets": ["group:billing", "bob"],
        "group": "reviewers",
    }
    assert data["handed over"]["handover"]["by"] == "bob"
    assert data["handed over"]["handover"]["note"] == "Ada's account: check <b>it</b>"
    assert data["handed over"]["handover"]["at"]
    assert data["one vote of two"]["quorum"] == {"required": 2, "approved_by": ["alice"], "groups": []}
    assert data["one vote of two"]["decision"] is None
    approved = data["approved"]["decision"]
    assert (
        approved["reviewer"] == "admin" and approved["note"] == "say thanks" and approved["reason"] == "fine"
    )
    assert data["edited"]["decision"]["verdict"] == "edit"
    assert data["edited"]["decision"]["arguments"]["subject"] == "Your refund, Ada"
    # The decision that completed the quorum settles it, not the first vote.
    assert data["approved by two"]["decision"]["reviewer"] == "alice"
    assert data["approved by two"]["quorum"]["approved_by"] == ["admin", "alice"]
    # Votes at one instant are told apart by their ids, as the worker orders them.
    assert data["two votes at one instant"]["quorum"]["approved_by"] == ["alice", "admin"]
    assert data["two votes at one instant"]["decision"]["reviewer"] == "admin"
    assert data["rejected"]["decision"]["verdict"] == "reject"
    assert data["question answered"]["kind"] == "question"
    assert data["question answered"]["decision"]["answer"] == "blue"
    assert data["reconcile"]["kind"] == "reconcile" and data["reconcile"]["quorum"]["approved_by"] == []
    assert data["reconcile, one re-run vote"]["quorum"]["approved_by"] == ["admin"]
    assert data["reconcile, one re-run vote"]["decision"] is None
    assert data["reconcile confirmed"]["decision"]["external_ref"] == "smtp-4711"
    assert data["expired"]["status"] == "expired" and data["expired"]["decision"] is None
    cancelled = data["cancelled after a vote"]
    assert cancelled["status"] == "cancelled" and cancelled["decision"] is None
    assert cancelled["quorum"]["approved_by"] == ["alice"]
    clocked = data["on the clock, long task"]
    assert clocked["respond_by"] and clocked["reminded_at"] and clocked["escalation_level"] == 2
    assert clocked["task"] == "x" * 280
    assert data["unknown agent"]["effect"] == "" and data["open"]["effect"] == "external"
    assert data["open"]["submitted_by"] == "carol" and data["open"]["agent"] == "demo"


def test_a_page_read_as_models_and_as_columns_is_the_same_page(every_shape):
    """The desk's pages read models (`approval_rows`, `approvals_data`), the API's list reads
    columns: a card and an API item of the same call agree."""
    approvals = ApprovalRequest.objects.filter(pk__in=[a.pk for a in every_shape.values()]).order_by("pk")
    assert approvals_page_data(list(approval_columns(approvals))) == approvals_data(approval_rows(approvals))


def test_votes_at_one_instant_are_ordered_by_id_whatever_order_they_come_in():
    """No database: the settling decision and the quorum's order, from votes handed over in the
    order a database may return ties in."""
    now = timezone.now()
    first, second = (Decision(id=uuid.UUID(int=n), verdict="approve", decided_at=now) for n in (1, 2))
    for given in ([first, second], [second, first]):
        assert approving_votes("tool_call", given) == [first, second]
        assert settling_decision(ApprovalStatus.APPROVED, given) is second
