"""The socket's snapshot is one page of the queue, in the desk page's order, with the counts.

Through the real ASGI stack and the Redis channel layer, as test_desk_socket.py; the pages
to compare with are rendered by Django's test client on the same database.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.test import Client
from django.utils import timezone

from reviewdesk.approvals.models import ApprovalRequest
from reviewdesk.approvals.reads.queue import QUEUE_PAGE_SIZE
from reviewdesk.asgi import application
from tests.reviewdesk.desk.test_desk_socket import in_thread, receive_until, session_headers

pytestmark = pytest.mark.django_db(transaction=True)

CARD_ID = re.compile(r'<li class="card"[^>]* data-approval-id="([0-9a-f-]+)"')


def clone_pending(
    approval: ApprovalRequest, n: int, *, assignees: list[str] | None = None, tool: str = ""
) -> None:
    """`n` more pending approvals like `approval`, each with its own call and expiry, in one insert."""
    now = timezone.now()
    start = ApprovalRequest.objects.count()
    ApprovalRequest.objects.bulk_create(
        ApprovalRequest(
            run_id=approval.run_id,
            checkpoint_id=approval.checkpoint_id,
            tool_call_id=f"clone-{start + i}",
            tool=tool or approval.tool,
            arguments=approval.arguments,
            arguments_sha256=approval.arguments_sha256,
            assignees=assignees if assignees is not None else approval.assignees,
            # Expiries interleave between the batches, so "mine first" is not creation order.
            expires_at=now + timedelta(minutes=10 + (i * 7919) % 997),
        )
        for i in range(n)
    )


def desk_page_ids(user, query: dict | None = None) -> list[str]:
    client = Client()
    client.force_login(user)
    response = client.get("/", query or {})
    assert response.status_code == 200
    return CARD_ID.findall(response.content.decode())


def snapshot_for(user, path: str = "/ws/desk/") -> dict:
    headers = session_headers(user)

    async def scenario():
        comm = WebsocketCommunicator(application, path, headers=headers)
        connected, _ = await comm.connect()
        assert connected
        snapshot = await receive_until(comm, "snapshot")
        await comm.disconnect()
        return snapshot

    return async_to_sync(scenario)()


@pytest.fixture
def a_long_queue(personas, interrupted_run):
    """Several pages pending for alice: some assigned to her by name, most open to any reviewer,
    a few of another tool; and some assigned to bob only, which she must not count."""
    _, approval = interrupted_run()
    clone_pending(approval, 5, assignees=["alice"])
    clone_pending(approval, 90)
    clone_pending(approval, 14, tool="refund_payment")
    clone_pending(approval, 30, assignees=["bob"])
    return 1 + 5 + 90 + 14  # alice's


def test_the_snapshot_is_the_first_page_in_the_desk_order_with_the_total(personas, a_long_queue):
    snapshot = snapshot_for(personas.alice)
    data = snapshot["data"]
    assert len(data["approvals"]) == QUEUE_PAGE_SIZE < a_long_queue
    assert data["total"] == data["matching"] == a_long_queue
    assert (data["offset"], data["limit"], data["more"]) == (0, QUEUE_PAGE_SIZE, True)
    assert [a["id"] for a in data["approvals"]] == desk_page_ids(personas.alice)
    # Mine first: the 5 assigned to alice lead the window, then the rest by expiry.
    assigned = [a["reviewer"]["users"] for a in data["approvals"]]
    assert assigned[:5] == [["alice"]] * 5 and ["alice"] not in assigned[5:]
    open_expiries = [a["expires_at"] for a in data["approvals"][5:]]
    assert len(open_expiries) > 1 and open_expiries == sorted(open_expiries)


def test_the_snapshot_follows_the_pages_filters_and_offset(personas, a_long_queue):
    last = (a_long_queue // QUEUE_PAGE_SIZE) * QUEUE_PAGE_SIZE  # the last page, not a full one
    assert 0 < a_long_queue - last < QUEUE_PAGE_SIZE
    data = snapshot_for(personas.alice, f"/ws/desk/?offset={last}")["data"]
    assert [a["id"] for a in data["approvals"]] == desk_page_ids(personas.alice, {"offset": last})
    assert len(data["approvals"]) == a_long_queue - last and data["more"] is False

    filtered = snapshot_for(personas.alice, "/ws/desk/?tool=refund_payment&assignee=any")["data"]
    assert [a["id"] for a in filtered["approvals"]] == desk_page_ids(
        personas.alice, {"tool": "refund_payment", "assignee": "any"}
    )
    assert (filtered["total"], filtered["matching"], filtered["more"]) == (a_long_queue, 14, False)


def test_bob_counts_only_what_he_may_see(personas, a_long_queue):
    data = snapshot_for(personas.bob)["data"]
    assert data["total"] == a_long_queue - 5 + 30  # not alice's 5, plus his own 30
    assert QUEUE_PAGE_SIZE < 30  # his own fill the whole first page
    assert [a["reviewer"]["users"] for a in data["approvals"]] == [["bob"]] * QUEUE_PAGE_SIZE


@pytest.mark.parametrize(
    "query",
    [
        f"offset={10**30}",
        "offset=-5",
        "offset=1e3",
        "&".join(f"f{i}=x" for i in range(40)),
        "run=not-a-uuid&offset=%ff",
    ],
    ids=["huge offset", "negative offset", "not an integer", "too many fields", "junk"],
)
def test_a_malformed_query_gets_a_page_never_a_closed_socket(personas, a_long_queue, query):
    data = snapshot_for(personas.alice, "/ws/desk/?" + query)["data"]
    assert data["offset"] == 0 and data["total"] == a_long_queue
    assert len(data["approvals"]) == (0 if query.startswith("run=") else QUEUE_PAGE_SIZE)


def test_a_nul_character_in_the_socket_urls_filter_matches_nothing(personas, a_long_queue):
    """`%00` is U+0000, which PostgreSQL text cannot hold: the snapshot's query raised
    DataError and the socket closed (the desk page: a 500). It reads as a filter no approval
    matches."""
    data = snapshot_for(personas.alice, "/ws/desk/?tool=send_email%00&agent=%00&assignee=%00")["data"]
    assert (data["approvals"], data["matching"], data["total"]) == ([], 0, a_long_queue)
    assert desk_page_ids(personas.alice, {"tool": "send_email\x00", "assignee": "\x00"}) == []
    assert desk_page_ids(personas.alice, {"tool": "send_email"}), "control: without the NUL it matches"


def test_a_filter_in_the_socket_url_never_widens_what_she_may_see(personas, a_long_queue):
    data = snapshot_for(personas.alice, "/ws/desk/?assignee=bob")["data"]
    assert (data["approvals"], data["matching"], data["total"]) == ([], 0, a_long_queue)


def test_a_desk_that_asks_for_a_snapshot_gets_its_window_and_count_now(personas, interrupted_run):
    """A page that cannot tell whether a call it has not seen was in its count (one handed over
    or escalated to the reviewer from elsewhere) asks its socket for a fresh snapshot: the same
    window the URL names, read now, with the count as the server has it."""
    from reviewdesk.approvals.lifecycle.handover import approval_handover

    run, approval = interrupted_run(reviewers=["alice"])
    headers = session_headers(personas.bob)
    path = f"/ws/desk/?events=approvals&run={run.id.hex}"

    async def scenario():
        comm = WebsocketCommunicator(application, path, headers=headers)
        connected, _ = await comm.connect()
        assert connected
        first = await receive_until(comm, "snapshot")
        await in_thread(approval_handover)(approval_id=approval.id, by=personas.alice, to="bob")
        await receive_until(comm, "approval.updated")
        await comm.send_json_to({"type": "snapshot"})
        again = await receive_until(comm, "snapshot")
        await comm.disconnect()
        return first, again

    first, again = async_to_sync(scenario)()
    assert (first["data"]["total"], first["data"]["approvals"]) == (0, [])
    assert again["data"]["total"] == 1
    assert [a["id"] for a in again["data"]["approvals"]] == [str(approval.id)]
    assert again["seq"] > first["seq"]
