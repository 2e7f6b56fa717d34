"""The hand-written reads and inserts of the hot paths (reviewdesk/lib/db_rows.py) give back what
the ORM gives: the same models, field for field, with the same types (UUIDs, datetimes, JSON,
booleans, nulls), on the database the suite runs on (SQLite, or PostgreSQL in CI)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.db import connection, transaction
from django.utils import timezone

from agents.state import CallState, CallStatus
from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.approvals.models import ApprovalKind, ApprovalRequest, Decision
from reviewdesk.approvals.rows import request_latest_with_decisions
from reviewdesk.events.models import DeskEvent
from reviewdesk.lib.db_rows import Columns, insert, table
from reviewdesk.runs.models import Attempt, Checkpoint, Run, SideEffect

pytestmark = pytest.mark.django_db

EMAIL = {"to": "ada@example.com", "subject": "Café ☕", "body": "It is on its way."}
SCRIPT = [{"tool_calls": [{"name": "send_email", "arguments": EMAIL}]}, {"content": "Emailed Ada."}]


def fields_of(instance) -> dict:
    return {f.attname: getattr(instance, f.attname) for f in type(instance)._meta.concrete_fields}


def read_back(model, pk):
    """The row through a hand-written SELECT built with `Columns`."""
    columns = Columns.of(model, "t")
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {columns.sql} FROM {table(model)} t WHERE t.id = %s",
            [model._meta.pk.get_db_prep_value(pk, connection)],
        )
        return columns.build(cursor.fetchone())


@pytest.fixture
def waiting_run(interrupted_run):
    """A run stopped at its `send_email` approval: rows with UUIDs, JSON, datetimes and nulls."""
    run, _ = interrupted_run(script=SCRIPT, metadata={"ticket": 7, "tags": ["a", "ü"], "none": None})
    return run


@pytest.mark.parametrize("model", [Run, ApprovalRequest, Checkpoint, Attempt, DeskEvent])
def test_a_row_read_by_hand_is_the_model_the_orm_builds(waiting_run, model):
    for row in model.objects.all()[:5]:
        built = read_back(model, row.pk)
        assert type(built) is model and not built._state.adding
        assert fields_of(built) == fields_of(row)
        # The same types, not only equal values (a UUID, not its hex; an aware datetime).
        assert {k: type(v) for k, v in fields_of(built).items()} == {
            k: type(v) for k, v in fields_of(row).items()
        }


def test_a_subset_of_columns_reads_converted_values(waiting_run):
    approval = waiting_run.approvals.get()
    columns = Columns.of(ApprovalRequest, "r", "arguments", "expires_at", "id")
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {columns.sql} FROM {table(ApprovalRequest)} r")
        arguments, expires_at, pk = columns.values(cursor.fetchone())
    assert (arguments, expires_at, pk) == (approval.arguments, approval.expires_at, approval.pk)
    assert isinstance(pk, uuid.UUID) and arguments["subject"] == "Café ☕"


def test_insert_writes_the_row_save_would_and_reads_back_its_key(waiting_run):
    attempt = waiting_run.attempts.get()
    before = timezone.now()
    with transaction.atomic():
        event = insert(DeskEvent(type="run.updated", run=waiting_run, audience=[3, 4], data={"ü": [1, None]}))
    assert isinstance(event.id, int) and not event._state.adding
    stored = DeskEvent.objects.get(pk=event.id)
    assert fields_of(stored) == fields_of(event)
    assert stored.created_at >= before  # auto_now_add, as save sets it

    effect = insert(
        SideEffect(
            run=waiting_run,
            idempotency_key=f"{waiting_run.pk}:call_x",
            tool_call_id="call_x",
            tool="send_email",
            status="confirmed",
            result={"id": "<m@x>", "n": 1.5},
            attempt=attempt,
        )
    )
    assert fields_of(SideEffect.objects.get(pk=effect.pk)) == fields_of(effect)


def test_insert_keeps_a_primary_key_the_caller_chose(waiting_run, personas):
    approval = waiting_run.approvals.get()
    chosen = uuid.uuid4()
    now = timezone.now()
    decision = insert(
        Decision(
            id=chosen,
            request=approval,
            verdict="reject",
            reviewer=personas.alice,
            arguments={},
            arguments_sha256="0" * 64,
            decided_at=now,
            not_after=now + timedelta(hours=1),
            nonce=uuid.uuid4().hex,
            payload={"decision_id": str(chosen)},
            signature="",
            key_id="k",
        )
    )
    assert decision.pk == chosen
    assert fields_of(Decision.objects.get(pk=chosen)) == fields_of(decision)


def test_a_calls_decisions_come_with_each_reviewers_groups_once(waiting_run, personas):
    """The decision read joins each reviewer's groups: a reviewer in several groups is one
    decision with every group, and one in none reads an empty set."""
    personas.alice.groups.add(Group.objects.create(name="finance"), Group.objects.create(name="legal"))
    approval = waiting_run.approvals.get()
    approval_decide(
        approval_id=approval.id,
        reviewer=personas.alice,
        verdict="approve",
        checkpoint_id=str(approval.checkpoint_id),
    )
    call = CallState(id=approval.tool_call_id, name="send_email", arguments=EMAIL, status=CallStatus.AWAITING)
    read, group_names = request_latest_with_decisions(waiting_run, call, (ApprovalKind.TOOL_CALL,))
    assert read == approval and [d.reviewer for d in read.decisions.all()] == [personas.alice]
    assert group_names == {personas.alice.pk: {"reviewers", "finance", "legal"}}
    alice_groups = set(personas.alice.groups.values_list("name", flat=True))
    assert group_names[personas.alice.pk] == alice_groups
    # No decision yet on another call: the request alone, no groups.
    other = CallState(id="call_none", name="send_email", arguments=EMAIL, status=CallStatus.AWAITING)
    assert request_latest_with_decisions(waiting_run, other, (ApprovalKind.TOOL_CALL,)) == (None, {})


def test_insert_many_writes_the_rows_bulk_create_would(waiting_run, settings, monkeypatch):
    """In batches the database takes (here 2 rows a statement), with `pre_save` applied; a key
    the database makes is not read back."""
    from reviewdesk.lib.db_rows import insert_many
    from reviewdesk.runs.models import Message

    monkeypatch.setattr(connection.ops, "bulk_batch_size", lambda fields, objs: 2)
    start = waiting_run.messages.count()
    rows = [
        Message(run=waiting_run, position=start + i, role="user", body={"role": "user", "content": f"ü {i}"})
        for i in range(5)
    ]
    with transaction.atomic():
        assert insert_many(rows) == rows
    assert all(row.pk is None and not row._state.adding for row in rows)
    stored = list(waiting_run.messages.filter(position__gte=start).order_by("position"))
    assert [(m.position, m.role, m.body) for m in stored] == [(r.position, r.role, r.body) for r in rows]
    assert all(
        m.created_at is not None and m.created_at == r.created_at for m, r in zip(stored, rows, strict=True)
    )
    assert insert_many([]) == []


def test_update_writes_the_named_fields_and_stamps_auto_now_as_save_does(waiting_run):
    from django.db import DatabaseError

    from reviewdesk.lib.db_rows import update, update_by_pk

    run = Run.objects.get(pk=waiting_run.pk)
    before = run.updated_at
    run.status, run.output, run.revision = "succeeded", "done ü", run.revision + 1
    run.error = "not named, so not written"
    update(run, ["status", "output", "revision", "updated_at"])
    stored = Run.objects.get(pk=run.pk)
    assert (stored.status, stored.output, stored.revision) == ("succeeded", "done ü", run.revision)
    assert stored.updated_at == run.updated_at > before  # auto_now, on the row and the instance
    assert stored.error != "not named, so not written"

    gone = Run(pk=uuid.uuid4(), status="queued")
    gone._state.adding = False  # as a row read, then deleted: save updates, not inserts
    # Each in a block of its own: the error marks the block for rollback, save's as this one's.
    with pytest.raises(DatabaseError, match="did not affect any rows"), transaction.atomic():
        gone.save(update_fields=["status"])
    with pytest.raises(DatabaseError, match="did not affect any rows"), transaction.atomic():
        update(gone, ["status"])

    attempt = waiting_run.attempts.get()
    assert update_by_pk(Attempt, attempt.pk, status="failed", error="x") == 1
    assert update_by_pk(Attempt, attempt.pk + 1000, status="failed") == 0
    assert Attempt.objects.filter(pk=attempt.pk, status="failed", error="x").exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="SQLite takes no row lock: the clause is empty")
def test_a_locked_read_outside_a_transaction_is_refused_as_the_orms_select_for_update_is(
    personas, waiting_run
):
    """FOR UPDATE in autocommit locks the row for its own statement only: the ORM's
    select_for_update refuses to run there (TransactionManagementError), and so does a
    hand-written locked read (db_rows.for_update_of), rather than return a row it does not hold."""
    from django.db.transaction import TransactionManagementError

    from reviewdesk.approvals.rows import approval_locked_with_attempt
    from reviewdesk.runs.rows import run_locked

    run = waiting_run
    approval = run.approvals.get()
    with pytest.raises(TransactionManagementError):
        Run.objects.select_for_update(of=("self",)).get(pk=run.pk)  # the ORM's refusal
    with pytest.raises(TransactionManagementError):
        run_locked(run.pk)
    with pytest.raises(TransactionManagementError):
        approval_locked_with_attempt(approval.pk)
    with transaction.atomic():
        assert run_locked(run.pk, with_submitter=True).submitted_by == personas.carol
        assert approval_locked_with_attempt(approval.pk).pk == approval.pk


def test_a_related_object_is_taken_as_save_takes_it_an_unsaved_one_refused(waiting_run):
    """insert and insert_many check the related objects as save and bulk_create do: one assigned
    unsaved is refused (ValueError), not written as a NULL key (an attempt's, a checkpoint's:
    nullable, so nothing else would say the link was lost); one saved since it was assigned
    gives its key."""
    from reviewdesk.lib.db_rows import insert_many

    attempt = Attempt(run=waiting_run, number=999, lease_epoch=999, expires_at=timezone.now())
    effect = SideEffect(
        run=waiting_run,
        idempotency_key="k",
        tool_call_id="c",
        tool="send_email",
        status="pending",
        attempt=attempt,
    )
    checkpoint = Checkpoint(
        run=waiting_run, attempt=attempt, number=999, schema_version=1, message_count=0, snapshot={}
    )
    with transaction.atomic():
        with pytest.raises(ValueError, match="unsaved related object 'attempt'"):
            insert(effect)
        with pytest.raises(ValueError, match="unsaved related object 'attempt'"):
            insert_many([checkpoint])
        assert not SideEffect.objects.filter(idempotency_key="k").exists()
        assert not Checkpoint.objects.filter(run=waiting_run, number=999).exists()
        insert(attempt)  # saved after it was assigned: the rows take its key
        insert(effect)
        insert_many([checkpoint])
    assert SideEffect.objects.get(idempotency_key="k").attempt_id == attempt.pk
    assert Checkpoint.objects.get(run=waiting_run, number=999).attempt_id == attempt.pk


def test_an_update_of_no_fields_writes_nothing_as_the_orm_does(waiting_run):
    """save(update_fields=[]) and a queryset's update() with no values run no statement; the
    hand-written ones built `UPDATE ... SET  WHERE`, an SQL error (on PostgreSQL, one that
    aborts the caller's whole transaction), for a list of changed fields that came out empty."""
    from django.test.utils import CaptureQueriesContext

    from reviewdesk.lib.db_rows import update, update_by_pk

    run = Run.objects.get(pk=waiting_run.pk)
    attempt = waiting_run.attempts.get()
    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        run.save(update_fields=[])
        assert Attempt.objects.filter(pk=attempt.pk).update() == 0
        update(run, [])
        assert update_by_pk(Attempt, attempt.pk) == 0
        assert Run.objects.filter(pk=run.pk).exists()  # the transaction is still usable
    assert len(queries) == 1


def test_a_failed_write_marks_the_atomic_block_for_rollback_as_the_orms_does(waiting_run):
    """save() and a queryset's update() mark the enclosing atomic block for rollback when their
    statement fails, so an error caught inside the block cannot be committed past: the next
    statement is refused (TransactionManagementError) on every database. The hand-written writes
    did not: on SQLite the block went on and committed the rest, while on PostgreSQL the
    aborted transaction refused it, so code that caught the error passed on the embedded
    default only."""
    from django.db import IntegrityError
    from django.db.transaction import TransactionManagementError

    from reviewdesk.lib.db_rows import insert_many, update, update_by_pk
    from reviewdesk.runs.models import Message

    def duplicate_effect():
        return SideEffect(
            run=waiting_run, idempotency_key="dup", tool_call_id="c", tool="send_email", status="pending"
        )

    insert(duplicate_effect())
    message = waiting_run.messages.first()
    run = Run.objects.get(pk=waiting_run.pk)
    writes = [
        ("save", lambda: duplicate_effect().save(force_insert=True)),
        ("insert", lambda: insert(duplicate_effect())),
        (
            "insert_many",
            lambda: insert_many([Message(run=waiting_run, position=message.position, role="x", body={})]),
        ),
        ("update", lambda: update(run, ["approval_ttl_seconds"])),
        ("update_by_pk", lambda: update_by_pk(Run, run.pk, status="not a status")),
    ]
    run.approval_ttl_seconds = -1  # a PositiveIntegerField's check refuses it
    for name, write in writes:
        with pytest.raises(TransactionManagementError), transaction.atomic():
            with pytest.raises(IntegrityError):
                write()
            Run.objects.filter(pk=run.pk).update(input=name)  # refused: the block must roll back
        assert Run.objects.get(pk=run.pk).input != name, name
