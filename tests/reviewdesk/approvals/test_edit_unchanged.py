"""An edit must change the call: one whose arguments are the call's own is refused, so the
record never names an approval an edit (issue 35, item 2: two Enters signed such an "edit")."""

from __future__ import annotations

import pytest

from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.approvals.models import ApprovalStatus, Decision
from reviewdesk.lib.errors import Invalid
from tests.reviewdesk.approvals.conftest import refund_script

pytestmark = pytest.mark.django_db


def edit(approval, reviewer, arguments):
    return approval_decide(
        approval_id=approval.id,
        reviewer=reviewer,
        verdict="edit",
        reason="",
        arguments=arguments,
        checkpoint_id=str(approval.checkpoint_id),
    )


def test_an_edit_with_the_calls_own_arguments_is_refused_and_the_call_stays_pending(
    interrupted_run, personas
):
    _, approval = interrupted_run(script=refund_script(150))
    same = dict(reversed(list(approval.arguments.items())))  # the same call, keys in another order
    with pytest.raises(Invalid) as refused:
        edit(approval, personas.alice, same)
    assert refused.value.code == "unchanged"
    assert refused.value.detail == "No changes: use Approve"
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING
    assert not Decision.objects.filter(request=approval).exists()


def test_an_edit_that_changes_one_field_is_signed(interrupted_run, personas):
    _, approval = interrupted_run(script=refund_script(150))
    edit(approval, personas.alice, {**approval.arguments, "amount": 120})
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.APPROVED
    assert Decision.objects.get(request=approval).verdict == "edit"
