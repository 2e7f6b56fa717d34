"""/ws/desk/ through the real ASGI stack and the Redis channel layer (no in-memory layer)."""

from __future__ import annotations

import asyncio
import time

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator
from django.db import connection, connections
from django.test import Client

from reviewdesk.accounts.roles import REVIEWERS
from reviewdesk.approvals.reads.queue import queue_sort_key
from reviewdesk.asgi import application
from reviewdesk.events.models import DeskEvent
from reviewdesk.events.services import REPLAY_PAGE_SIZE, event_push, latest_seq

pytestmark = pytest.mark.django_db(transaction=True)

ORIGIN = (b"origin", b"http://127.0.0.1:8000")  # the embedded default: ALLOWED_HOSTS on PORT


def session_headers(user) -> list[tuple[bytes, bytes]]:
    client = Client()
    client.force_login(user)
    return [(b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode()), ORIGIN]


def communicator(headers) -> WebsocketCommunicator:
    return WebsocketCommunicator(application, "/ws/desk/", headers=headers)


def in_thread(fn):
    """Run `fn` in a worker thread (so on_commit pushes reach the socket) and close its DB connection."""

    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        finally:
            connections.close_all()

    return sync_to_async(call, thread_sensitive=False)


MARKER = "test.marker"


def push_marker(*user_ids: int) -> None:
    """A desk event to these users' groups (none: every reviewer's), after everything pushed
    before it. A group's messages reach a socket in the order they were published, and the
    socket handles each before the next: once it has the marker, it has handled all that came
    before it on that group, which proves what it did not do better than a pause would."""
    from django.db import transaction

    from reviewdesk.events.services import event_emit

    with transaction.atomic():
        event_emit(type=MARKER, data={}, audience=list(user_ids))


async def receive_until(comm: WebsocketCommunicator, type_: str, timeout: float = 10) -> dict:
    """Next message of `type_`, skipping heartbeats and other types."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            raise AssertionError(f"no {type_} within {timeout}s")
        try:
            message = await comm.receive_json_from(timeout=remaining)
        except TimeoutError:
            raise AssertionError(f"no {type_} within {timeout}s") from None
        if message["type"] == type_:
            return message


async def replay_as_the_desk_does(comm: WebsocketCommunicator, after: int) -> tuple[list[dict], list[dict]]:
    """Replay after `after`, then from each replay.done's seq while it says `more`, as desk.js does.

    Returns the events received and the replay.done messages, in order.
    """
    events, dones = [], []
    await comm.send_json_to({"type": "replay", "after": after})
    while True:
        message = await comm.receive_json_from(timeout=10)
        if message["type"] == "heartbeat":
            continue
        if message["type"] != "replay.done":
            events.append(message)
            continue
        dones.append(message)
        if not message["data"].get("more"):
            return events, dones
        await comm.send_json_to({"type": "replay", "after": message["seq"]})


def add_events(*audiences: list[int]) -> list[DeskEvent]:
    """One desk event per audience, written directly (nothing pushed), in sequence order."""
    DeskEvent.objects.bulk_create(
        DeskEvent(type="run.updated", data={"n": n}, audience=audience)
        for n, audience in enumerate(audiences)
    )
    return list(DeskEvent.objects.order_by("-id")[: len(audiences)])[::-1]


def visible_to(user, events: list[DeskEvent]) -> list[int]:
    return [e.id for e in events if not e.audience or user.pk in e.audience]


def test_an_anonymous_socket_is_refused():
    async def scenario():
        comm = communicator([ORIGIN])
        connected, _ = await comm.connect()
        assert not connected

    async_to_sync(scenario)()


def test_a_non_reviewer_socket_is_refused(personas):
    headers = session_headers(personas.olivia)

    async def scenario():
        comm = communicator(headers)
        connected, _ = await comm.connect()
        assert not connected

    async_to_sync(scenario)()


def test_a_socket_from_a_foreign_origin_is_refused(personas):
    headers = [h for h in session_headers(personas.alice) if h[0] != b"origin"]
    headers.append((b"origin", b"http://evil.example"))

    async def scenario():
        comm = communicator(headers)
        connected, _ = await comm.connect()
        assert not connected

    async_to_sync(scenario)()


def test_a_reviewer_gets_a_snapshot_then_the_new_approval_live(personas, interrupted_run):
    headers = session_headers(personas.alice)

    async def scenario():
        comm = communicator(headers)
        connected, _ = await comm.connect()
        assert connected
        snapshot = await comm.receive_json_from(timeout=5)
        assert snapshot["type"] == "snapshot"
        assert snapshot["data"]["approvals"] == []

        _, approval = await in_thread(interrupted_run)()

        created = await receive_until(comm, "approval.created")
        assert created["seq"] > snapshot["seq"]
        assert created["data"]["id"] == str(approval.id)
        assert created["data"]["tool"] == "send_email"
        assert created["data"]["arguments"] == approval.arguments
        assert created["data"]["reviewer"] == {"users": [], "targets": [], "group": "reviewers"}
        assert created["data"]["quorum"] == {"required": 1, "approved_by": [], "groups": []}
        assert created["data"]["expires_at"]
        await comm.disconnect()

    async_to_sync(scenario)()


def test_a_pushed_event_reaches_the_socket_while_the_sync_thread_is_busy(personas, interrupted_run):
    """Under daphne one thread runs every sync view of a process: a push to a socket must not
    queue behind it (Channels' own dispatch hops there before each handler; `make bench` #8)."""
    headers = session_headers(personas.alice)

    async def scenario():
        comm = communicator(headers)
        assert (await comm.connect())[0]
        await receive_until(comm, "snapshot")
        # This test's thread is the consumers' sync thread: hold it, as a slow request would.
        busy = asyncio.ensure_future(sync_to_async(time.sleep)(8))
        _, approval = await in_thread(interrupted_run)()
        created = await receive_until(comm, "approval.created", timeout=6)
        assert created["data"]["id"] == str(approval.id)
        assert not busy.done(), "the event waited for the sync thread"
        await busy
        await comm.disconnect()

    async_to_sync(scenario)()


def test_after_a_disconnect_replay_returns_what_was_missed(personas, interrupted_run):
    headers = session_headers(personas.alice)

    async def scenario():
        comm = communicator(headers)
        assert (await comm.connect())[0]
        last_seen = (await comm.receive_json_from(timeout=5))["seq"]
        await comm.disconnect()

        _, missed = await in_thread(interrupted_run)()

        comm = communicator(headers)
        assert (await comm.connect())[0]
        snapshot = await receive_until(comm, "snapshot")
        assert [a["id"] for a in snapshot["data"]["approvals"]] == [str(missed.id)]
        await comm.send_json_to({"type": "replay", "after": last_seen})
        replayed = []
        while True:
            message = await comm.receive_json_from(timeout=5)
            if message["type"] == "replay.done":
                break
            if message["type"] != "heartbeat":
                replayed.append(message)
        assert [m["seq"] for m in replayed] == sorted(m["seq"] for m in replayed)
        assert all(m["seq"] > last_seen for m in replayed)
        created = [m for m in replayed if m["type"] == "approval.created"]
        assert [m["data"]["id"] for m in created] == [str(missed.id)]
        assert message["seq"] >= created[0]["seq"]
        await comm.disconnect()

    async_to_sync(scenario)()


def test_an_assigned_approval_reaches_its_reviewer_and_admins_only(personas, interrupted_run):
    alice, bob, admin = (session_headers(u) for u in (personas.alice, personas.bob, personas.admin))

    async def scenario():
        socks = {}
        for name, headers in (("alice", alice), ("bob", bob), ("admin", admin)):
            socks[name] = communicator(headers)
            assert (await socks[name].connect())[0]
            await receive_until(socks[name], "snapshot")

        _, approval = await in_thread(interrupted_run)(reviewers=["bob"])

        for name in ("bob", "admin"):
            message = await receive_until(socks[name], "approval.created")
            assert message["data"]["id"] == str(approval.id)
        # alice is a reviewer, but not this one's: she must never see it, pushed or replayed.
        # Markers after it on each group a push to her could take (hers, every reviewer's):
        # by the time both reach her socket, any copy of the approval would have come first.
        alice_sock = socks["alice"]
        await in_thread(push_marker)(personas.alice.pk)
        await in_thread(push_marker)()
        for _ in range(2):
            message = await alice_sock.receive_json_from(timeout=10)
            while message["type"] != MARKER:
                assert message["type"] != "approval.created"
                message = await alice_sock.receive_json_from(timeout=10)
        await alice_sock.send_json_to({"type": "replay", "after": 0})
        message = await alice_sock.receive_json_from(timeout=5)
        while message["type"] != "replay.done":
            assert message["type"] != "approval.created"
            message = await alice_sock.receive_json_from(timeout=5)
        for comm in socks.values():
            await comm.disconnect()

    async_to_sync(scenario)()


def test_the_heartbeat_carries_the_latest_sequence(personas, interrupted_run):
    headers = session_headers(personas.alice)
    interrupted_run()

    async def scenario():
        comm = communicator(headers)
        assert (await comm.connect())[0]
        snapshot = await receive_until(comm, "snapshot")
        beat = await receive_until(comm, "heartbeat", timeout=6)
        assert beat["seq"] == snapshot["seq"] > 0
        await comm.disconnect()

    async_to_sync(scenario)()


def test_a_replay_longer_than_a_page_pages_on_and_skips_nothing(personas):
    alice, bob = personas.alice, personas.bob
    headers = session_headers(alice)
    start = latest_seq()
    # Every reviewer's, bob's only and alice's only, in turn, past the end of the first page.
    events = add_events(*([[], [bob.pk], [alice.pk]] * (REPLAY_PAGE_SIZE // 3 + 100)))

    async def scenario():
        comm = communicator(headers)
        assert (await comm.connect())[0]
        await receive_until(comm, "snapshot")
        replayed, dones = await replay_as_the_desk_does(comm, start)
        assert [m["seq"] for m in replayed] == visible_to(alice, events)
        assert len(dones) > 1 and all(d["data"]["more"] for d in dones[:-1])
        assert [d["seq"] for d in dones] == sorted({d["seq"] for d in dones})
        assert dones[-1]["data"]["more"] is False and dones[-1]["seq"] == events[-1].id
        await comm.disconnect()

    async_to_sync(scenario)()


def test_events_a_reviewer_may_not_see_do_not_hide_the_ones_she_may_nor_keep_her_replaying(personas):
    alice, bob = personas.alice, personas.bob
    headers = session_headers(alice)
    start = latest_seq()
    # More than a page of bob's, one for every reviewer, then a few more of bob's at the end.
    events = add_events(*([[bob.pk]] * (REPLAY_PAGE_SIZE + 50) + [[]] + [[bob.pk]] * 5))

    async def scenario():
        comm = communicator(headers)
        assert (await comm.connect())[0]
        await receive_until(comm, "snapshot")
        replayed, dones = await replay_as_the_desk_does(comm, start)
        assert [m["seq"] for m in replayed] == visible_to(alice, events) == [events[-6].id]
        # The last replay.done covers bob's tail, so the heartbeat gives her nothing more to ask.
        assert dones[-1]["seq"] == events[-1].id
        beat = await receive_until(comm, "heartbeat", timeout=6)
        assert beat["seq"] == dones[-1]["seq"]
        await comm.disconnect()

    async_to_sync(scenario)()


def test_an_event_committed_while_a_replay_runs_is_in_it_or_after_its_seq(personas, settings):
    settings.DESK_WS_HEARTBEAT_SECONDS = 60  # only the replay reads the latest sequence here
    alice = personas.alice
    headers = session_headers(alice)
    start = latest_seq()
    earlier = add_events([])
    late: list[DeskEvent] = []

    def commit_one_as_the_replay_reads_the_latest(execute, sql, params, many, context):
        # Consumers' database calls run on this thread's connection (thread-sensitive).
        if armed and not late and sql.startswith("SELECT") and "ORDER BY 1 DESC LIMIT 1" in sql:
            late.extend(add_events([]))
        return execute(sql, params, many, context)

    armed = False

    async def scenario():
        nonlocal armed
        comm = communicator(headers)
        assert (await comm.connect())[0]
        await receive_until(comm, "snapshot")
        armed = True
        replayed, dones = await replay_as_the_desk_does(comm, start)
        assert late, "the hook never ran: did the replay stop reading the latest sequence?"
        # Everything she may see up to the seq she will resume from, she has had.
        covered = [e.id for e in earlier + late if e.id <= dones[-1]["seq"]]
        assert [m["seq"] for m in replayed] == covered
        await comm.disconnect()

    with connection.execute_wrapper(commit_one_as_the_replay_reads_the_latest):
        async_to_sync(scenario)()


# --- the desk page's socket: approval events only, and it vouches for what it skips ----------


def desk_page_communicator(headers) -> WebsocketCommunicator:
    return WebsocketCommunicator(application, "/ws/desk/?events=approvals", headers=headers)


def push(*audiences: list[int], type_: str = "run.updated") -> list[DeskEvent]:
    """Events written (as add_events) and pushed as the commit would push them."""
    events = add_events(*audiences)
    for event in events:
        event.type = type_
        event.save(update_fields=["type"])
        event_push(event)
    return events


def test_the_desk_pages_socket_skips_run_updates_and_says_so(personas, interrupted_run):
    headers = session_headers(personas.alice)
    add_events([])  # the snapshot's seq is an event's, as it is once the desk has run a while

    async def scenario():
        page, every = desk_page_communicator(headers), communicator(headers)
        for comm in (page, every):
            assert (await comm.connect())[0]
        snapshot = await receive_until(page, "snapshot")
        await receive_until(every, "snapshot")

        await in_thread(interrupted_run)()

        # The run page's socket (every event) sees the run's updates around the approval ...
        seen = [await every.receive_json_from(timeout=5)]
        while not (seen[-1]["type"] == "run.updated" and seen[-1]["data"]["status"] == "input_required"):
            seen.append(await every.receive_json_from(timeout=5))
        events = [m for m in seen if m["type"] != "heartbeat"]
        created = next(m for m in events if m["type"] == "approval.created")
        assert [m["seq"] for m in events] == list(range(snapshot["seq"] + 1, events[-1]["seq"] + 1))
        assert created["seq"] > snapshot["seq"] + 1, "no run.updated before the approval"
        # ... the desk page's gets the approval alone, vouching for what it skipped before it,
        received = await page.receive_json_from(timeout=5)
        # with the approval's place in alice's queue, as the Python that orders the page says
        # (queue_sort_key), and whether it passes the page's filters (none here: it does).
        placed = {"sort_key": queue_sort_key(created["data"], "alice"), "matches": True}
        assert received == {**created, "data": {**created["data"], "desk": placed}, "after": snapshot["seq"]}
        # and the next heartbeat vouches for the update after it: no replay needed.
        beat = await receive_until(page, "heartbeat", timeout=6)
        assert beat == {"seq": events[-1]["seq"], "type": "heartbeat", "data": {}, "after": snapshot["seq"]}
        for comm in (page, every):
            await comm.disconnect()

    async_to_sync(scenario)()


def test_the_desk_pages_socket_never_vouches_for_an_event_it_did_not_get(personas):
    alice, bob = personas.alice, personas.bob
    headers = session_headers(alice)
    add_events([])  # the snapshot's seq is an event's, as it is once the desk has run a while

    async def scenario():
        page = desk_page_communicator(headers)
        assert (await page.connect())[0]
        snapshot = await receive_until(page, "snapshot")
        start = snapshot["seq"]
        # One for every reviewer (skipped), one for bob only (never hers), then an approval.
        await in_thread(push)([], [bob.pk])
        (first,) = await in_thread(push)([], type_="approval.created")
        received = await receive_until(page, "approval.created")
        assert received["seq"] == first.id == start + 3
        assert "after" not in received  # bob's event is between: desk.js must replay
        # From that approval on, what reaches her is whole again.
        await in_thread(push)([])
        (second,) = await in_thread(push)([], type_="approval.updated")
        received = await receive_until(page, "approval.updated")
        assert received["seq"] == second.id and received["after"] == start + 2
        beat = await receive_until(page, "heartbeat", timeout=6)
        assert beat["seq"] == second.id and beat["after"] == start + 2
        await in_thread(push)([bob.pk])  # the latest is bob's: the heartbeat vouches for nothing
        beat = await receive_until(page, "heartbeat", timeout=6)
        assert beat["seq"] == second.id + 1 and "after" not in beat
        await page.disconnect()

    async_to_sync(scenario)()


def test_a_socket_without_the_desk_pages_query_gets_every_event_as_before(personas):
    headers = session_headers(personas.alice)

    async def scenario():
        comm = communicator(headers)
        assert (await comm.connect())[0]
        await receive_until(comm, "snapshot")
        (update,) = await in_thread(push)([])
        received = await receive_until(comm, "run.updated")
        assert received == update.as_message()
        await comm.disconnect()

    async_to_sync(scenario)()


def test_coverage_joins_its_runs_when_an_overtaken_event_arrives_late():
    """In-process, the Coverage class alone: two writers publish out of commit order (a worker's
    event can overtake the web's), and the desk page must not replay for that."""
    from reviewdesk.desk.consumers import Coverage

    coverage = Coverage(10)
    coverage.add(12)  # 11 is late, or another user's
    assert coverage.after(13) == 11  # vouches only from 12: a client at 10 replays
    coverage.add(11)  # late: the gap was only a reordering
    assert coverage.after(13) == 10 and coverage.after_through(12) == 10
    coverage.add(11)  # a second copy changes nothing
    assert coverage.after(13) == 10


def test_coverage_never_vouches_across_a_hole_that_stays_open():
    from reviewdesk.desk.consumers import Coverage

    coverage = Coverage(0)
    coverage.add(3)  # 1 and 2 missing
    coverage.add(1)
    assert coverage.after(4) == 2 and coverage.after_through(3) == 2  # 2 still missing
    wide = Coverage(0)
    wide.add(Coverage.MAX_HELD_GAP + 2)  # too wide to remember
    wide.add(1)
    assert wide.after(Coverage.MAX_HELD_GAP + 3) == Coverage.MAX_HELD_GAP + 1


def test_a_hand_over_note_reaches_only_who_may_see_the_call(personas, interrupted_run):
    """A call open to every reviewer, handed over by alice to bob with a note. Every reviewer's
    desk hears of it (its card leaves theirs), but the note is written for who may see the call
    now: bob and the admins. dave, a reviewer who may no longer see it, got the note too, pushed
    and replayed; he now gets the event with the note left blank."""
    from reviewdesk.approvals.lifecycle.handover import approval_handover
    from tests.conftest import make_user

    dave = make_user("dave", REVIEWERS)

    _, approval = interrupted_run()
    assert approval.assignees == []  # open to every reviewer
    heads = {u.username: session_headers(u) for u in (dave, personas.bob, personas.admin)}

    async def scenario():
        socks = {}
        for name, headers in heads.items():
            socks[name] = communicator(headers)
            assert (await socks[name].connect())[0]
            await receive_until(socks[name], "snapshot")
        await in_thread(approval_handover)(
            approval_id=approval.id, by=personas.alice, to="bob", note="her account is frozen"
        )
        pushed = {name: await receive_until(sock, "approval.updated") for name, sock in socks.items()}
        await socks["dave"].send_json_to({"type": "replay", "after": 0})
        replayed = [m async for m in _until_replay_done(socks["dave"]) if m["type"] == "approval.updated"]
        for comm in socks.values():
            await comm.disconnect()
        return pushed, replayed

    pushed, replayed = async_to_sync(scenario)()
    notes = {name: message["data"]["handover"]["note"] for name, message in pushed.items()}
    assert notes == {"dave": "", "bob": "her account is frozen", "admin": "her account is frozen"}
    assert pushed["dave"]["data"]["reviewer"]["targets"] == ["bob"]  # his desk drops the card
    assert [m["data"]["handover"]["note"] for m in replayed] == [""]


async def _until_replay_done(comm):
    while (message := await comm.receive_json_from(timeout=5))["type"] != "replay.done":
        yield message
