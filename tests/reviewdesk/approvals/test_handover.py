"""POST /api/v1/approvals/{id}/handover: who may hand over, to whom, audited, pushed live."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync

from reviewdesk.accounts.roles import REVIEWERS
from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.approvals.models import ApprovalRequest, ApprovalStatus
from reviewdesk.audit.models import AuditEvent
from tests.conftest import make_user
from tests.reviewdesk.approvals.conftest import EXECUTE_SCRIPT, refund_script
from tests.reviewdesk.desk.test_desk_socket import communicator, in_thread, receive_until, session_headers

pytestmark = pytest.mark.django_db


def hand_over(client, approval, to, note=""):
    return client.post(f"/api/v1/approvals/{approval.id}/handover", {"to": to, "note": note}, format="json")


def test_a_reviewer_hands_an_item_to_a_colleague_with_a_note(interrupted_run, personas, api_as):
    _, approval = interrupted_run(reviewers=["alice"])
    response = hand_over(api_as(personas.alice, "review"), approval, "bob", "you know this customer")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["reviewer"]["targets"] == ["bob"]
    assert body["handover"]["by"] == "alice" and body["handover"]["note"] == "you know this customer"
    approval.refresh_from_db()
    assert (approval.assignees, approval.handed_over_by, approval.handover_note) == (
        ["bob"],
        personas.alice,
        "you know this customer",
    )
    audit = AuditEvent.objects.get(action="approval.handed_over", subject_id=str(approval.id))
    assert audit.actor == personas.alice
    assert audit.data == {
        "run": str(approval.run_id),
        "from": ["alice"],
        "to": "bob",
        "note": "you know this customer",
    }
    # It left alice's desk and reached bob's.
    assert api_as(personas.alice, "review").get(f"/api/v1/approvals/{approval.id}").status_code == 404
    assert api_as(personas.bob, "review").get(f"/api/v1/approvals/{approval.id}").status_code == 200


def test_a_hand_over_to_a_group_lets_its_members_decide(interrupted_run, personas, api_as, dave):
    _, approval = interrupted_run()
    assert hand_over(api_as(personas.alice, "review"), approval, "group:finance").status_code == 200
    approval_decide(
        approval_id=approval.id, reviewer=dave, verdict="approve", checkpoint_id=str(approval.checkpoint_id)
    )
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.APPROVED


def test_someone_who_may_not_decide_the_item_cannot_hand_it_over(interrupted_run, personas, api_as, sam):
    _, approval = interrupted_run()
    # Not a reviewer at all.
    assert hand_over(api_as(personas.olivia, "review"), approval, "bob").status_code == 403
    # A run sam submitted: he sees it (any reviewer) but may not decide it, so not hand it over.
    approval.run.submitted_by = sam
    approval.run.save(update_fields=["submitted_by"])
    response = hand_over(api_as(sam, "review"), approval, "bob")
    assert response.status_code == 403 and response.json()["code"] == "forbidden"
    assert ApprovalRequest.objects.get(pk=approval.pk).assignees == []
    assert not AuditEvent.objects.filter(action="approval.handed_over").exists()


@pytest.mark.parametrize(
    "target",
    ["carol", "olivia", "nobody", "group:empty", "group:nosuch", "", "group:", "a b"],
    ids=[
        "the submitter",
        "not a reviewer",
        "unknown user",
        "empty group",
        "unknown group",
        "blank",
        "bare prefix",
        "space",
    ],
)
def test_a_hand_over_to_someone_who_may_not_decide_is_422(interrupted_run, personas, api_as, target):
    from django.contrib.auth.models import Group

    Group.objects.get_or_create(name="empty")
    carol = personas.carol
    carol.groups.add(Group.objects.get(name="reviewers"))  # a reviewer too: still the submitter
    _, approval = interrupted_run()
    response = hand_over(api_as(personas.alice, "review"), approval, target)
    assert response.status_code == 422, response.json()
    approval.refresh_from_db()
    assert approval.assignees == [] and approval.handed_over_by is None


def test_a_hand_over_to_a_group_with_no_reviewer_in_it_is_422(personas, api_as, interrupted_run):
    make_user("solo", "finance")  # in finance but not a reviewer
    _, approval = interrupted_run()
    response = hand_over(api_as(personas.alice, "review"), approval, "group:finance")
    assert response.status_code == 422


def test_a_hand_over_to_a_reviewer_who_already_voted_is_422_and_votes_survive(
    interrupted_run, personas, api_as
):
    _, approval = interrupted_run(script=EXECUTE_SCRIPT)
    approval_decide(
        approval_id=approval.id,
        reviewer=personas.alice,
        verdict="approve",
        checkpoint_id=str(approval.checkpoint_id),
    )
    assert hand_over(api_as(personas.bob, "review"), approval, "alice").status_code == 422
    # To bob's colleague admin: alice's vote stays counted, and she stays among the targets.
    assert hand_over(api_as(personas.bob, "review"), approval, "admin").status_code == 200
    approval.refresh_from_db()
    assert approval.assignees == ["admin", "alice"]
    approval_decide(
        approval_id=approval.id,
        reviewer=personas.admin,
        verdict="approve",
        checkpoint_id=str(approval.checkpoint_id),
    )
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.APPROVED


def test_a_reviewer_who_already_voted_cannot_hand_the_item_over(interrupted_run, personas, api_as):
    make_user("erin", REVIEWERS)
    _, approval = interrupted_run(script=EXECUTE_SCRIPT)
    approval_decide(
        approval_id=approval.id,
        reviewer=personas.alice,
        verdict="approve",
        checkpoint_id=str(approval.checkpoint_id),
    )

    # She may not cast the second vote, so she may not choose who does either.
    response = hand_over(api_as(personas.alice, "review"), approval, "bob")

    assert response.status_code == 409 and response.json()["code"] == "voted"
    approval.refresh_from_db()
    assert approval.assignees == []  # still open to bob, erin, admin
    assert not AuditEvent.objects.filter(action="approval.handed_over").exists()


def test_a_decided_item_cannot_be_handed_over(interrupted_run, personas, api_as):
    _, approval = interrupted_run()
    approval_decide(
        approval_id=approval.id,
        reviewer=personas.bob,
        verdict="reject",
        checkpoint_id=str(approval.checkpoint_id),
    )
    response = hand_over(api_as(personas.alice, "review"), approval, "bob")
    assert response.status_code == 409 and response.json()["code"] == "decided"


def test_a_hand_over_needs_the_review_scope_and_a_known_body(interrupted_run, personas, api_as):
    _, approval = interrupted_run()
    assert hand_over(api_as(personas.alice, "submit"), approval, "bob").status_code == 403
    response = api_as(personas.alice, "review").post(
        f"/api/v1/approvals/{approval.id}/handover", {"to": "bob", "tip": "x"}, format="json"
    )
    assert response.status_code == 422 and response.json()["code"] == "invalid"


def test_a_large_refund_handed_from_finance_to_alice_reaches_her_only(
    interrupted_run, personas, api_as, dave
):
    _, approval = interrupted_run(script=refund_script(5000))
    assert hand_over(api_as(dave, "review"), approval, "alice", "I am off today").status_code == 200
    assert api_as(dave, "review").get(f"/api/v1/approvals/{approval.id}").status_code == 404
    assert api_as(personas.alice, "review").get(f"/api/v1/approvals/{approval.id}").json()["handover"][
        "note"
    ] == ("I am off today")


@pytest.mark.django_db(transaction=True)
def test_a_hand_over_is_pushed_live_to_the_old_and_the_new_reviewer(interrupted_run, personas):
    """Real sockets on the Redis channel layer: alice's desk hears the item go, bob's hears it come."""
    from reviewdesk.approvals.lifecycle.handover import approval_handover

    _, approval = interrupted_run(reviewers=["alice"])
    alice_headers, bob_headers = session_headers(personas.alice), session_headers(personas.bob)

    async def scenario():
        alice, bob = communicator(alice_headers), communicator(bob_headers)
        assert (await alice.connect())[0] and (await bob.connect())[0]
        alice_snapshot = await receive_until(alice, "snapshot")
        bob_snapshot = await receive_until(bob, "snapshot")
        assert [a["id"] for a in alice_snapshot["data"]["approvals"]] == [str(approval.id)]
        assert bob_snapshot["data"]["approvals"] == []

        await in_thread(approval_handover)(approval_id=approval.id, by=personas.alice, to="bob", note="yours")

        for comm in (alice, bob):
            pushed = await receive_until(comm, "approval.updated")
            assert pushed["data"]["id"] == str(approval.id)
            assert pushed["data"]["reviewer"]["targets"] == ["bob"]
            assert pushed["data"]["handover"]["note"] == "yours"
        await alice.disconnect()
        await bob.disconnect()

    async_to_sync(scenario)()
