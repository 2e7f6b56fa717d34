"""Who may see an approval: the queryset's rule (`approvals_visible_to`, for lists and pages)
and the same rule on one row already read (`approval_visible_to`, which a decision applies to
the row it has locked) give the same answer for every user and every kind of routing."""

from __future__ import annotations

import uuid

import pytest
from django.contrib.auth.models import Group

from reviewdesk.approvals.access import approval_visible_to, approvals_visible_to
from reviewdesk.approvals.models import ApprovalRequest

pytestmark = pytest.mark.django_db

ROUTES = [[], ["alice"], ["bob"], ["group:finance"], ["carol", "group:legal"], ["nobody"]]


def test_the_rule_on_one_row_agrees_with_the_querysets_for_every_user_and_route(personas, interrupted_run):
    personas.bob.groups.add(Group.objects.create(name="finance"))
    personas.olivia.groups.add(Group.objects.create(name="legal"))  # in legal, but not a reviewer
    _, raised = interrupted_run()
    approvals = [raised]
    for i, route in enumerate(ROUTES):
        copy = ApprovalRequest.objects.get(pk=raised.pk)
        copy.pk, copy.tool_call_id, copy.assignees = uuid.uuid4(), f"call_route_{i}", route
        copy.save(force_insert=True)
        approvals.append(copy)
    users = [personas.admin, personas.alice, personas.bob, personas.carol, personas.olivia]
    answers = {}
    for user in users:
        visible = set(approvals_visible_to(user, related=False).values_list("pk", flat=True))
        for approval in approvals:
            assert approval_visible_to(user, approval) == (approval.pk in visible), (user, approval.assignees)
            answers[(user.username, tuple(approval.assignees))] = approval.pk in visible
    # The matrix is not trivial: each answer occurs.
    assert answers[("alice", ("alice",))] and not answers[("alice", ("bob",))]
    assert answers[("bob", ("group:finance",))] and not answers[("olivia", ("carol", "group:legal"))]
    assert answers[("admin", ("nobody",))] and not answers[("carol", ())]


@pytest.mark.parametrize(
    "approval_id", ["not-a-uuid", "", uuid.UUID(int=7), 12], ids=["text", "empty", "unknown", "int"]
)
def test_a_decision_on_a_malformed_or_unknown_id_is_not_found(personas, approval_id):
    from reviewdesk.approvals.deciding.record import approval_decide
    from reviewdesk.lib.errors import NotFound

    with pytest.raises(NotFound, match="no such approval"):
        approval_decide(
            approval_id=approval_id, reviewer=personas.alice, verdict="approve", checkpoint_id="x"
        )
