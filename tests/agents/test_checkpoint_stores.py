"""One conformance suite for every checkpoint store: in-memory, database, Redis."""

from __future__ import annotations

import uuid

import pytest

from agents.state import AgentState, CallState, CallStatus, Step
from agents.store import InMemoryCheckpointStore, RedisCheckpointStore


def snapshot(message_count: int = 3, **changes) -> dict:
    state = AgentState(
        step=Step.TOOLS,
        message_count=message_count,
        batch=[
            CallState(id="call_0_0", name="send_email", arguments={"to": "a@b.c"}, status=CallStatus.AWAITING)
        ],
        model_calls=1,
    )
    return {**state.to_snapshot(), **changes}


@pytest.fixture(params=["memory", pytest.param("database", marks=pytest.mark.django_db), "redis"])
def store_and_runs(request):
    """(store, new_run_id) for each implementation; the database store needs real Run rows."""
    if request.param == "memory":
        return InMemoryCheckpointStore(), lambda: str(uuid.uuid4())
    if request.param == "redis":
        client = request.getfixturevalue("redis_client")
        prefix = f"test-checkpoints-{uuid.uuid4().hex}"
        request.addfinalizer(lambda: [client.delete(k) for k in client.scan_iter(f"{prefix}:*")])
        return RedisCheckpointStore(client, prefix=prefix), lambda: str(uuid.uuid4())
    from reviewdesk.runs.checkpoints import DatabaseCheckpointStore
    from reviewdesk.runs.models import Run

    personas = request.getfixturevalue("personas")

    def new_run_id() -> str:
        run = Run.objects.create(
            agent="demo",
            input="x",
            model={"provider": "scripted", "script": []},
            approval_ttl_seconds=60,
            submitted_by=personas.carol,
        )
        return str(run.id)

    return DatabaseCheckpointStore(), new_run_id


def test_a_new_run_has_no_checkpoint(store_and_runs):
    store, new_run = store_and_runs
    run_id = new_run()
    assert store.latest(run_id) is None
    assert store.list(run_id) == []
    assert store.get(str(uuid.uuid4())) is None


def test_put_then_latest_and_get_return_the_same_snapshot(store_and_runs):
    store, new_run = store_and_runs
    run_id = new_run()
    saved = store.put(run_id, snapshot())
    for loaded in (store.latest(run_id), store.get(saved.id)):
        assert loaded.id == saved.id
        assert loaded.run_id == run_id
        assert loaded.snapshot == snapshot()
        assert loaded.message_count == 3
        assert AgentState.from_snapshot(loaded.snapshot).batch[0].status == CallStatus.AWAITING


def test_latest_is_the_last_put_and_list_keeps_put_order(store_and_runs):
    store, new_run = store_and_runs
    run_id = new_run()
    ids = [store.put(run_id, snapshot(message_count=n)).id for n in range(2, 7)]
    assert store.latest(run_id).id == ids[-1]
    assert [c.id for c in store.list(run_id)] == ids
    assert [c.message_count for c in store.list(run_id)] == [2, 3, 4, 5, 6]


def test_an_explicit_checkpoint_id_is_kept(store_and_runs):
    store, new_run = store_and_runs
    run_id, checkpoint_id = new_run(), str(uuid.uuid4())
    assert store.put(run_id, snapshot(), checkpoint_id=checkpoint_id).id == checkpoint_id
    assert store.get(checkpoint_id).run_id == run_id


def test_runs_do_not_see_each_others_checkpoints(store_and_runs):
    store, new_run = store_and_runs
    first, second = new_run(), new_run()
    a = store.put(first, snapshot())
    b = store.put(second, snapshot(message_count=9))
    assert [c.id for c in store.list(first)] == [a.id]
    assert store.latest(second).id == b.id


def test_a_stored_snapshot_does_not_change_when_the_caller_mutates_its_copy(store_and_runs):
    store, new_run = store_and_runs
    run_id = new_run()
    data = snapshot()
    saved = store.put(run_id, data)
    data["batch"][0]["status"] = "done"
    store.latest(run_id).snapshot["batch"][0]["status"] = "rejected"
    assert store.get(saved.id).snapshot["batch"][0]["status"] == "awaiting_approval"
