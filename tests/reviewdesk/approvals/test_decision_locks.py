"""A decision holds its run's row and its approval's row locked from its check to its commit
(PostgreSQL, on real connections: SQLite's writing transactions already exclude each other)."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection, transaction

from reviewdesk.approvals.deciding.checks import approval_check_decide
from reviewdesk.approvals.deciding.input import DecisionInput
from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.approvals.models import ApprovalRequest, ApprovalStatus, Decision
from reviewdesk.lib.errors import Conflict
from reviewdesk.runs.models import Run
from tests.reviewdesk.lib.test_writers_lock import Holder, Writer, seen_waiting

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="SQLite serialises every writer"),
]


@pytest.fixture
def approval(interrupted_run) -> ApprovalRequest:
    return interrupted_run()[1]


def locked_elsewhere(model, pk) -> bool:
    """Whether another transaction holds the row's lock: FOR UPDATE NOWAIT, on this thread's
    own connection, refuses at once instead of waiting."""
    try:
        with transaction.atomic():
            list(model.objects.select_for_update(nowait=True).filter(pk=pk))
    except DatabaseError:
        return True
    return False


def test_a_decisions_check_locks_the_run_and_the_approval_until_it_ends(approval, personas):
    checking = Holder(
        lambda: approval_check_decide(
            approval_id=approval.id,
            reviewer=personas.alice,
            decision=DecisionInput(verdict="approve", checkpoint_id=str(approval.checkpoint_id)),
        )
    )
    checking.start()
    assert checking.written.wait(30) and checking.error is None, checking.error
    try:
        assert locked_elsewhere(Run, approval.run_id)
        assert locked_elsewhere(ApprovalRequest, approval.pk)
    finally:
        checking.release.set()
        checking.join(30)
    assert not locked_elsewhere(Run, approval.run_id)
    assert not locked_elsewhere(ApprovalRequest, approval.pk)


def test_a_rival_decision_waits_for_the_first_to_commit_then_finds_the_call_decided(approval, personas):
    """Two reviewers approve the same single-approval call at once: the second waits on the
    locked rows, then reads the first decision and is refused (409 decided). Without the lock
    both would read it pending and both would be recorded."""
    first = Holder(
        lambda: approval_decide(
            approval_id=approval.id,
            reviewer=personas.alice,
            verdict="approve",
            checkpoint_id=str(approval.checkpoint_id),
        )
    )
    first.start()
    assert first.written.wait(30) and first.error is None, first.error
    second = Writer(
        lambda: approval_decide(
            approval_id=approval.id,
            reviewer=personas.bob,
            verdict="reject",
            reason="no",
            checkpoint_id=str(approval.checkpoint_id),
        )
    )
    second.start()
    waited = seen_waiting(second)
    first.release.set()
    first.join(30)
    assert second.done.wait(30)
    assert waited, "the second decision did not wait for the first one's commit"
    assert isinstance(second.error, Conflict) and second.error.code == "decided", second.error
    assert list(Decision.objects.values_list("reviewer__username", flat=True)) == ["alice"]
    assert ApprovalRequest.objects.get(pk=approval.pk).status == ApprovalStatus.APPROVED
