"""`atomic_appends_last` (reviewdesk/lib/db.py): audit rows and desk events written at the block's end.

In-process, on the test database (SQLite or PostgreSQL): what is written, when, in which
order, and what a rolled-back savepoint or an error leaves. The last test needs PostgreSQL
and two real connections: a second writer is not kept waiting while the block works.
"""

from __future__ import annotations

import threading

import pytest
from django.db import connection, connections, transaction

from reviewdesk.audit.models import AuditEvent
from reviewdesk.audit.services import audit_record
from reviewdesk.audit.verification import audit_check
from reviewdesk.events import services as events
from reviewdesk.events.models import DeskEvent
from reviewdesk.events.services import event_emit
from reviewdesk.lib.db import atomic_appends_last

pytestmark = pytest.mark.django_db(transaction=True)


def audit(action: str):
    return audit_record(actor=None, action=action, subject_type="test", subject_id=action)


def emit(kind: str):
    return event_emit(type=kind, data={"kind": kind}, audience=[])


def actions() -> list[str]:
    return list(AuditEvent.objects.order_by("id").values_list("action", flat=True))


def kinds() -> list[str]:
    return list(DeskEvent.objects.order_by("id").values_list("type", flat=True))


def test_rows_are_written_at_the_blocks_end_in_call_order():
    with atomic_appends_last():
        assert audit("one") is None and emit("first") is None
        audit("two")
        emit("second")
        assert actions() == [] and kinds() == [], "written before the block's end"
    assert actions() == ["one", "two"]
    assert kinds() == ["first", "second"]
    assert DeskEvent.objects.get(type="first").data == {"kind": "first"}
    assert audit_check().intact


def test_a_nested_block_is_written_with_the_outermost_one():
    with atomic_appends_last():
        audit("outer")
        with atomic_appends_last():
            audit("inner")
        assert actions() == [], "the inner block wrote on its own"
    assert actions() == ["outer", "inner"]


def test_appends_in_a_rolled_back_savepoint_are_dropped_and_not_pushed(monkeypatch):
    pushed: list[str] = []
    monkeypatch.setattr(events, "event_push", lambda event: pushed.append(event.type))
    with atomic_appends_last():
        audit("kept")
        emit("kept")
        with pytest.raises(RuntimeError), transaction.atomic():
            audit("dropped")
            emit("dropped")
            raise RuntimeError("the savepoint rolls back")
    assert actions() == ["kept"]
    assert kinds() == ["kept"]
    assert pushed == ["kept"]
    assert audit_check().intact


def test_an_error_in_the_block_writes_and_pushes_nothing(monkeypatch):
    pushed: list[str] = []
    monkeypatch.setattr(events, "event_push", lambda event: pushed.append(event.type))
    with pytest.raises(RuntimeError), atomic_appends_last():
        audit("never")
        emit("never")
        raise RuntimeError("rolled back")
    assert actions() == [] and kinds() == [] and pushed == []


def test_an_events_push_keeps_its_place_among_the_commit_hooks(monkeypatch):
    """A task sent after an event (a requeue's resume) still leaves after the event's push,
    though the event row is written after the send was registered."""
    order: list[str] = []
    monkeypatch.setattr(events, "event_push", lambda event: order.append(f"push {event.type} {event.id}"))
    with atomic_appends_last():
        emit("run.updated")
        transaction.on_commit(lambda: order.append("send resume"))
    event_id = DeskEvent.objects.get().id
    assert order == [f"push run.updated {event_id}", "send resume"]


class HeldBlock(threading.Thread):
    """An `atomic_appends_last` block on a connection of its own: it runs `append`, then stays
    open, still at work, until `finish()`."""

    def __init__(self, append, errors: list[BaseException]) -> None:
        super().__init__(daemon=True)
        self.append, self.errors = append, errors
        self.appended, self.release = threading.Event(), threading.Event()

    def run(self) -> None:
        try:
            with atomic_appends_last():
                self.append()
                self.appended.set()
                assert self.release.wait(30), "never released"
        except BaseException as exc:  # reported by the test
            self.errors.append(exc)
        finally:
            self.appended.set()
            connections.close_all()

    def finish(self) -> None:
        self.release.set()
        self.join(30)


def in_thread(work, errors: list[BaseException]) -> threading.Event:
    """Run `work` on a connection of its own; the event is set once it has ended."""
    done = threading.Event()

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # reported by the test
            errors.append(exc)
        finally:
            done.set()
            connections.close_all()

    threading.Thread(target=run, daemon=True).start()
    return done


@pytest.mark.skipif(connection.vendor != "postgresql", reason="SQLite serialises every writer")
def test_a_second_writer_is_not_kept_waiting_while_the_block_works():
    """Two real connections: while a block that has appended is still at work, another
    transaction appends and commits; the block's rows then follow it in the chain."""
    errors: list[BaseException] = []

    def quick() -> None:
        with transaction.atomic():
            audit("quick")
            emit("quick")

    slow = HeldBlock(lambda: (audit("slow"), emit("slow")), errors)
    slow.start()
    assert slow.appended.wait(30) and not errors, errors
    through = in_thread(quick, errors).wait(10)
    slow.finish()
    assert not errors, errors
    assert through, "the second writer waited for the block to end"
    assert actions() == ["quick", "slow"]
    assert kinds() == ["quick", "slow"]
    assert audit_check().intact


@pytest.mark.skipif(connection.vendor != "postgresql", reason="SQLite serialises every writer")
def test_a_webhook_deleted_while_the_block_works_gets_no_delivery_and_fails_nothing(personas, settings):
    """Two real connections: the block's run.updated event is webhook-worthy for carol's
    endpoint; she deletes the endpoint while the block is still at work. The block's commit
    succeeds and no delivery names the deleted endpoint (read under the writers' lock, which
    the delete takes too)."""
    from reviewdesk.runs.models import Run
    from reviewdesk.webhooks.models import WebhookDelivery, WebhookEndpoint
    from reviewdesk.webhooks.services import webhook_delete, webhook_register

    run = Run.objects.create(
        agent="demo", input="x", model={}, submitted_by=personas.carol, approval_ttl_seconds=3600
    )
    settings.DESK_WEBHOOKS_ALLOW_PRIVATE = True
    endpoint, _ = webhook_register(owner=personas.carol, url="http://127.0.0.1:9/", events=["run.succeeded"])
    errors: list[BaseException] = []

    def succeeded() -> None:
        event_emit(type="run.updated", data={"status": "succeeded"}, run_id=run.pk, audience=[])

    block = HeldBlock(succeeded, errors)
    block.start()
    assert block.appended.wait(30) and not errors, errors
    deleted = in_thread(lambda: webhook_delete(webhook_id=endpoint.id, owner=personas.carol), errors)
    deleted.wait(10)
    block.finish()
    assert deleted.wait(30)
    assert not errors, errors
    assert not WebhookEndpoint.objects.filter(pk=endpoint.pk).exists()
    assert kinds() == ["run.updated"]
    assert not WebhookDelivery.objects.exists()
