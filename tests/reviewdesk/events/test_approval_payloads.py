"""An approval's payload read as a model and read as a page's columns is the same payload.

In-process (the test database, the services called directly). The approvals list builds its
page from `values()` rows (`approvals_page_data`, issue 11 #7b); every other payload is built
from a model (`approval_data`). These tests compare the two, key by key, over approvals in every
shape a payload takes: open and assigned, handed over with a note, with a quorum's first vote,
settled by one reviewer's approval, by a quorum's second or by a rejection, a reconciliation,
expired, on the clock, and raised by an agent this desk no longer knows.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.utils import timezone

from reviewdesk.approvals.handover import approval_handover
from reviewdesk.approvals.models import ApprovalRequest, ApprovalStatus
from reviewdesk.approvals.services import approval_decide
from reviewdesk.events.builders import (
    SHOWN,
    approval_columns,
    approval_data,
    approval_rows,
    approvals_data,
    approvals_page_data,
)
from reviewdesk.runs.models import Run
from tests.reviewdesk.approvals.conftest import EXECUTE_SCRIPT

pytestmark = pytest.mark.django_db


def decide(approval, reviewer, verdict="approve", **options):
    return approval_decide(
        approval_id=approval.id,
        reviewer=reviewer,
        verdict=verdict,
        checkpoint_id=str(approval.checkpoint_id),
        **options,
    )


@pytest.fixture
def every_shape(interrupted_run, quorum_reconcile, personas):
    """One approval of each shape, by name."""
    Group.objects.get_or_create(name="billing")[0].user_set.add(personas.alice, personas.admin)
    shapes = {}
    _, shapes["open"] = interrupted_run()
    _, assigned = interrupted_run()
    ApprovalRequest.objects.filter(pk=assigned.pk).update(assignees=["group:billing", "bob"])
    shapes["assigned"] = assigned
    _, handed = interrupted_run()
    shapes["handed over"] = approval_handover(
        approval_id=handed.id, by=personas.alice, to="group:billing", note="Ada's account: check <b>it</b>"
    )
    _, voted = interrupted_run(script=EXECUTE_SCRIPT)
    decide(voted, personas.alice)
    shapes["one vote of two"] = voted
    _, quorum = interrupted_run(script=EXECUTE_SCRIPT)
    decide(quorum, personas.bob)
    decide(quorum, personas.alice)
    shapes["approved by two"] = quorum
    _, approved = interrupted_run()
    decide(approved, personas.bob, reason="fine", note="say thanks")
    shapes["approved"] = approved
    _, rejected = interrupted_run()
    decide(rejected, personas.alice, verdict="reject", reason="wrong person")
    shapes["rejected"] = rejected
    _, shapes["reconcile"] = quorum_reconcile()
    _, expired = interrupted_run()
    ApprovalRequest.objects.filter(pk=expired.pk).update(status=ApprovalStatus.EXPIRED)
    shapes["expired"] = expired
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
    assert data["handed over"]["handover"]["by"] == "alice"
    assert data["handed over"]["handover"]["note"] == "Ada's account: check <b>it</b>"
    assert data["handed over"]["handover"]["at"]
    assert data["one vote of two"]["quorum"] == {"required": 2, "approved_by": ["alice"], "groups": []}
    assert data["one vote of two"]["decision"] is None
    assert (
        data["approved"]["decision"]["reviewer"] == "bob"
        and data["approved"]["decision"]["note"] == "say thanks"
    )
    assert data["rejected"]["decision"]["verdict"] == "reject"
    # The decision that completed the quorum settles it, not the first vote.
    assert data["approved by two"]["decision"]["reviewer"] == "alice"
    assert data["approved by two"]["quorum"]["approved_by"] == ["bob", "alice"]
    assert data["reconcile"]["kind"] == "reconcile"
    assert data["expired"]["status"] == "expired" and data["expired"]["decision"] is None
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


def test_the_columns_name_every_field_a_payload_reads_and_nothing_the_model_lacks(every_shape):
    row = approval_columns(ApprovalRequest.objects.filter(pk=every_shape["handed over"].pk)).get()
    assert tuple(row) == SHOWN
