"""Two workers reconciling one server at the same moment, on PostgreSQL (threads in this
process, each with its own connection, meeting at a barrier inside the reconcile)."""

from __future__ import annotations

import contextlib
import threading
import time

import pytest
from django.db import connection

from agents.mcp import PinState
from reviewdesk.audit.models import AuditEvent
from reviewdesk.mcp import pins
from reviewdesk.mcp.models import PendingState, ToolPin
from reviewdesk.mcp.pins import DjangoPinStore
from tests.reviewdesk.mcp.pins import DELETE, READ, READ_CHANGED, SERVER
from tests.reviewdesk.runs.test_leases_and_races import in_threads

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="SQLite serialises every writer"),
]


def wait_for_the_other(barrier: threading.Barrier) -> None:
    """Meet the other worker here, or time out: it is blocked behind this one's lock or insert."""
    with contextlib.suppress(threading.BrokenBarrierError):
        barrier.wait(timeout=3)


def test_two_workers_seeing_a_server_for_the_first_time_at_once_make_one_pin_per_tool(monkeypatch):
    """Both read no pin, then meet just before inserting: the second insert waits on the
    first's (the unique constraint), then reads its row; one pin and one audit row per tool."""
    met = threading.Barrier(2)
    seal = pins.seal_first_sight

    def seal_when_both_have_read(**kwargs):
        wait_for_the_other(met)
        return seal(**kwargs)

    monkeypatch.setattr(pins, "seal_first_sight", seal_when_both_have_read)

    results = in_threads(*(lambda: DjangoPinStore().reconcile(SERVER, [READ, DELETE]) for _ in range(2)))

    assert not any(isinstance(r, Exception) for r in results), results
    assert sorted(r["read_file"] for r in results) == sorted([PinState.NEW, PinState.PINNED])
    assert ToolPin.objects.count() == 2
    assert AuditEvent.objects.filter(action="mcp_tool.pinned").count() == 2


def test_two_workers_finding_the_same_change_at_once_record_and_audit_it_once(monkeypatch):
    """Each compares the pin with what is served; the first holds the pin's row lock until it
    has recorded the change, so the second reads it recorded."""
    DjangoPinStore().reconcile(SERVER, [READ])
    met = threading.Barrier(2)
    verifies = pins.pin_verifies

    def verify_when_both_have_read(pin):
        wait_for_the_other(met)
        return verifies(pin)

    monkeypatch.setattr(pins, "pin_verifies", verify_when_both_have_read)

    results = in_threads(*(lambda: DjangoPinStore().reconcile(SERVER, [READ_CHANGED]) for _ in range(2)))

    assert results == [{"read_file": PinState.CHANGED}] * 2
    assert ToolPin.objects.get().pending_state == PendingState.CHANGED
    assert AuditEvent.objects.filter(action="mcp_tool.changed").count() == 1


def test_two_workers_pinning_overlapping_tools_at_once_both_finish(monkeypatch):
    """One (A) lists read_file and delete_file, the other (B: the server changed its list
    between) read_file alone. The test orders them: A inserts delete_file, and only then does B
    insert read_file, a second before A's own insert of read_file, which waits on B's. Were an
    audit row written as it is asked for, A would hold the writers' lock from delete_file's
    audit while it waited, and B would wait on that lock to audit read_file: a deadlock, one of
    them failing. Written at the block's end, B audits and commits, and A reads B's pin."""
    seal = pins.seal_first_sight
    first_seen: dict[str, int] = {}
    a_at_read_file = threading.Event()
    b_sealed = threading.Event()

    def seal_in_order(**kwargs):
        sealed = seal(**kwargs)
        me = threading.get_ident()
        if kwargs["tool"] == "delete_file":
            first_seen["a"] = me  # A's first insert (and, written at once, its audit) follow
        elif first_seen.get("a") == me:
            a_at_read_file.set()
            b_sealed.wait(timeout=5)
            time.sleep(1)  # B's insert of read_file lands before A's
        else:
            a_at_read_file.wait(timeout=5)
            b_sealed.set()
        return sealed

    monkeypatch.setattr(pins, "seal_first_sight", seal_in_order)

    results = in_threads(
        lambda: DjangoPinStore().reconcile(SERVER, [READ, DELETE]),
        lambda: DjangoPinStore().reconcile(SERVER, [READ]),
    )

    assert not any(isinstance(r, Exception) for r in results), results
    assert results[0]["delete_file"] == PinState.NEW
    assert sorted([results[0]["read_file"], results[1]["read_file"]]) == sorted(
        [PinState.NEW, PinState.PINNED]
    )
    assert sorted(ToolPin.objects.values_list("tool", flat=True)) == ["delete_file", "read_file"]
    assert AuditEvent.objects.filter(action="mcp_tool.pinned").count() == 2
