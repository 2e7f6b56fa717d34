"""The approval page under routing and quorum: the count, the voter's state, the hand-over form."""

from __future__ import annotations

import pytest

from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.audit.models import AuditEvent
from tests.reviewdesk.desk.test_approval_page import logged_in

pytestmark = pytest.mark.django_db

EXECUTE_SCRIPT = [
    {"tool_calls": [{"name": "execute", "arguments": {"command": "echo hi"}}]},
    {"content": "Ran it."},
]


def test_the_page_shows_the_quorum_count_and_no_edit(interrupted_run, personas):
    _, approval = interrupted_run(script=EXECUTE_SCRIPT)
    approval_decide(
        approval_id=approval.id,
        reviewer=personas.alice,
        verdict="approve",
        checkpoint_id=str(approval.checkpoint_id),
    )
    page = logged_in(personas.bob).get(f"/approvals/{approval.id}/").content.decode()
    assert '<span class="quorum" id="quorum-count">1 of 2</span>' in page
    assert "approved by alice" in page
    assert 'id="decide-form"' in page and 'id="edit-link"' not in page and 'id="edit-form"' not in page


def test_a_reviewer_who_voted_sees_that_and_no_buttons(interrupted_run, personas):
    _, approval = interrupted_run(script=EXECUTE_SCRIPT)
    approval_decide(
        approval_id=approval.id,
        reviewer=personas.alice,
        verdict="approve",
        checkpoint_id=str(approval.checkpoint_id),
    )
    page = logged_in(personas.alice).get(f"/approvals/{approval.id}/").content.decode()
    assert 'id="voted"' in page and 'id="decide-form"' not in page
    assert 'data-voted="yes"' in page
    # Her desk no longer lists it: her part is done.
    desk = logged_in(personas.alice).get("/").content.decode()
    assert f'data-approval-id="{approval.id}"' not in desk
    assert f'data-approval-id="{approval.id}"' in logged_in(personas.bob).get("/").content.decode()


def test_the_hand_over_form_hands_over_and_the_page_shows_the_note(interrupted_run, personas):
    _, approval = interrupted_run(reviewers=["alice"])
    alice = logged_in(personas.alice)
    assert 'id="handover-form"' in alice.get(f"/approvals/{approval.id}/").content.decode()
    response = alice.post(f"/approvals/{approval.id}/handover/", {"to": "bob", "note": "your customer"})
    assert response.status_code == 302 and response["Location"] == "/"
    assert AuditEvent.objects.filter(action="approval.handed_over", actor=personas.alice).count() == 1
    page = logged_in(personas.bob).get(f"/approvals/{approval.id}/").content.decode()
    assert "your customer" in page and 'id="handover"' in page
    assert logged_in(personas.alice).get(f"/approvals/{approval.id}/").status_code == 404


def test_the_hand_over_form_says_why_it_refused(interrupted_run, personas):
    _, approval = interrupted_run()
    alice = logged_in(personas.alice)
    response = alice.post(f"/approvals/{approval.id}/handover/", {"to": "carol", "note": ""}, follow=True)
    assert "Not handed over: " in response.content.decode()
    assert not AuditEvent.objects.filter(action="approval.handed_over").exists()


@pytest.mark.parametrize(
    "form", [{"to": "bob\x00"}, {"to": "bob", "note": "your\x00 customer"}], ids=["to", "note"]
)
def test_a_nul_in_the_hand_over_form_is_refused_with_its_reason_not_a_500(interrupted_run, personas, form):
    """U+0000, which PostgreSQL text cannot hold: looked up or stored as typed, it was a 500."""
    _, approval = interrupted_run()
    response = logged_in(personas.alice).post(f"/approvals/{approval.id}/handover/", form, follow=True)
    page = response.content.decode()
    assert response.status_code == 200 and "Not handed over: " in page
    assert ("to: invalid" in page) if "note" not in form else ("Null characters are not allowed." in page)
    assert not AuditEvent.objects.filter(action="approval.handed_over").exists()


def test_an_outsider_cannot_post_the_hand_over_form(interrupted_run, personas):
    _, approval = interrupted_run()
    response = logged_in(personas.olivia).post(f"/approvals/{approval.id}/handover/", {"to": "bob"})
    assert response.status_code == 403


def test_once_settled_the_voter_sees_the_decision_not_a_waiting_vote(interrupted_run, personas):
    """A single approval settles the request: its reviewer's page shows the decision, who
    signed it and with which key, not "waits for N reviewers"."""
    _, approval = interrupted_run()
    approval_decide(
        approval_id=approval.id,
        reviewer=personas.alice,
        verdict="approve",
        checkpoint_id=str(approval.checkpoint_id),
    )
    page = logged_in(personas.alice).get(f"/approvals/{approval.id}/").content.decode()
    assert 'id="voted"' not in page and 'id="decision-title"' in page
    assert 'id="decision-signer"' in page and "server-signed" in page


def test_a_voter_is_not_offered_the_hand_over_form(interrupted_run, personas):
    _, approval = interrupted_run(script=EXECUTE_SCRIPT)
    assert (
        'id="handover-form"' in logged_in(personas.alice).get(f"/approvals/{approval.id}/").content.decode()
    )
    approval_decide(
        approval_id=approval.id,
        reviewer=personas.alice,
        verdict="approve",
        checkpoint_id=str(approval.checkpoint_id),
    )
    assert (
        'id="handover-form"'
        not in logged_in(personas.alice).get(f"/approvals/{approval.id}/").content.decode()
    )
    assert 'id="handover-form"' in logged_in(personas.bob).get(f"/approvals/{approval.id}/").content.decode()


def test_a_quorum_tools_reconciliation_page_counts_rerun_votes(quorum_reconcile, personas):
    """execute needs two reviewers, so re-running its unknown effect needs two re-run votes: the
    page says so before the first, and the voter sees their vote instead of the buttons."""
    _, reconcile = quorum_reconcile()
    page = logged_in(personas.alice).get(f"/approvals/{reconcile.id}/").content.decode()
    assert 'id="reconcile-form"' in page and 'id="rerun-quorum"' in page
    assert "A re-run needs 2 different reviewers' votes" in page

    approval_decide(
        approval_id=reconcile.id,
        reviewer=personas.bob,
        verdict="rerun",
        checkpoint_id=str(reconcile.checkpoint_id),
    )

    page = logged_in(personas.alice).get(f"/approvals/{reconcile.id}/").content.decode()
    assert '<span class="quorum" id="quorum-count">1 of 2</span>' in page and 'id="reconcile-form"' in page
    page = logged_in(personas.bob).get(f"/approvals/{reconcile.id}/").content.decode()
    assert "You voted to re-run this call" in page and 'id="reconcile-form"' not in page
