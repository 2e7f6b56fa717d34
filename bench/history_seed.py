"""#9's history: finished runs written in bulk with the rows a real cycle leaves (messages,
two attempts, two checkpoints, a decided approval with its decision, a ledger row, desk
events, and audit rows that continue the chain), spread over several submitters and agents;
some name a reviewer whose approval was routed, handed over or escalated to others.
executemany on SQLite, COPY on PostgreSQL; bench/history.py measures around it."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
import uuid
from datetime import UTC, timedelta
from typing import Any

from django.core.management.color import no_style

from bench.common import SHORT

# What bench.cycle's runs carry (it is imported only to measure: it needs the running stack).
EMAIL = {"to": "ada@example.com", "subject": "Refund", "body": "It is on its way."}
MODEL = {
    "provider": "scripted",
    "script": [{"tool_calls": [{"name": "send_email", "arguments": EMAIL}]}, {"content": "Emailed Ada."}],
}
HISTORY = 10_000 if SHORT else 100_000
BATCH = 2_000
PAGE_HISTORY = 200  # more than a page of runs: the pages' baseline
SUBMITTERS = [f"history-submitter-{i}" for i in range(4)]
# Mostly the registered demo agent; some runs of agents since retired (no longer registered),
# as a long-lived desk has.
AGENTS = ["demo", "demo", "demo", "billing", "support"]
REVIEWERS = ["alice", "bob", "dave"]


def history_users(people) -> list[Any]:
    """carol and a few more submitters."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    from reviewdesk.accounts.roles import SUBMITTERS as SUBMITTERS_GROUP

    users = [people.carol]
    group = Group.objects.get(name=SUBMITTERS_GROUP)
    for name in SUBMITTERS:
        user, _ = get_user_model().objects.get_or_create(username=name)
        user.groups.add(group)
        users.append(user)
    return users


def _assignment(i: int) -> tuple[list[str], list[str], dict[str, Any]]:
    """(run reviewers, approval assignees, approval extras) for the i-th history run: most open
    to any reviewer; some naming a reviewer, whose approval was routed to a group, handed over
    or escalated to others, who may open the run too."""
    from reviewdesk.accounts.demo import FINANCE

    kind = i % 20
    if kind == 0:
        return ["alice"], [f"group:{FINANCE}"], {}  # routed to finance
    if kind == 1:
        return ["alice"], ["bob"], {}  # routed to bob
    if kind == 2:
        return ["bob"], ["bob"], {}
    if kind == 3:
        return ["alice"], ["dave"], {"handover_note": "over to you", "handed_over_at": True}
    if kind == 4:
        return ["alice"], ["alice", "bob"], {"escalation_level": 1}
    return [], [], {}


class Encoded(str):
    """A JSON value already encoded: the rows share a few constant ones."""


def encoded(value: Any) -> Encoded:
    return Encoded(json.dumps(value))


class Table:
    """Rows of one model as tuples in its columns' order, inserted in one statement per batch
    (executemany on SQLite, COPY on PostgreSQL): the ORM's per-object work would take minutes."""

    def __init__(self, model, connection, *, skip_pk: bool = False) -> None:
        from django.db import models

        self.model, self.connection = model, connection
        self.fields = [f for f in model._meta.concrete_fields if not (skip_pk and f.primary_key)]
        self.defaults = {f.attname: f.get_default() for f in self.fields}
        postgres = connection.vendor == "postgresql"

        def converter(field):
            target = field.target_field if field.is_relation else field
            if isinstance(target, models.UUIDField):
                return (lambda v: v) if postgres else (lambda v: v if v is None else v.hex)
            if isinstance(field, models.JSONField):
                return lambda v: v if v is None or type(v) is Encoded else json.dumps(v)
            if isinstance(field, models.DateTimeField) and not postgres:
                # SQLite keeps naive UTC text (its adapter's work, for the UTC times given here).
                return lambda v: v if v is None else str(v.replace(tzinfo=None))
            return lambda v: v

        self.convert = [(f.attname, converter(f)) for f in self.fields]
        self.rows: list[tuple] = []

    def add(self, **values: Any) -> None:
        defaults = self.defaults
        self.rows.append(
            tuple(conv(values[name] if name in values else defaults[name]) for name, conv in self.convert)
        )

    def flush(self) -> int:
        table = self.connection.ops.quote_name(self.model._meta.db_table)
        columns = ", ".join(self.connection.ops.quote_name(f.column) for f in self.fields)
        rows, self.rows = self.rows, []
        if not rows:
            return 0
        if self.connection.vendor == "postgresql":
            raw = self.connection.connection
            with raw.cursor() as cursor, cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
        else:
            marks = ", ".join(["%s"] * len(self.fields))
            with self.connection.cursor() as cursor:
                cursor.executemany(f"INSERT INTO {table} ({columns}) VALUES ({marks})", rows)
        return len(rows)


def _audit_hash(
    key: bytes, *, pk: int, prev: str, actor_id, actor_name, at, action, subject_type, subject_id
) -> str:
    """The chain's keyed hash (audit.chain.keyed_hash) for these plain rows: its canonical JSON
    written with json.dumps, which is RFC 8785's for ASCII strings and integers. seed_history
    checks it against keyed_hash on each batch's first row."""
    message = {
        "v": 2,
        "id": pk,
        "prev": prev,
        "actor_id": actor_id,
        "at": at.isoformat(),
        "actor": actor_name,
        "action": action,
        "subject_type": subject_type,
        "subject_id": subject_id,
        "data": {},
    }
    text = json.dumps(message, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    return hmac.new(key, text, hashlib.sha256).hexdigest()


def seed_history(count: int, people, *, batch: int = BATCH, budget: float | None = None) -> dict[str, Any]:
    """Insert `count` finished runs, each with the rows a real cycle leaves; their counts and
    the seconds it took. Stops early past `budget` seconds (the count says how many went in)."""
    from django.contrib.auth import get_user_model
    from django.db import connection, transaction
    from django.utils import timezone

    from agents.canonical import sha256_hex
    from agents.state import SCHEMA_VERSION
    from reviewdesk.approvals.models import ApprovalRequest, ApprovalStatus, Decision, Verdict
    from reviewdesk.audit.chain import GENESIS, row_hash
    from reviewdesk.audit.keys import audit_key
    from reviewdesk.audit.models import AuditEvent, ChainVersion
    from reviewdesk.events.models import DeskEvent
    from reviewdesk.lib.db import serialize_writers
    from reviewdesk.runs.models import (
        Attempt,
        AttemptStatus,
        Checkpoint,
        EffectStatus,
        Message,
        Run,
        RunStatus,
        SideEffect,
    )

    assert ChainVersion.KEYED.value == 2, "the chain's version changed: update _audit_hash"
    started = time.monotonic()
    submitters = history_users(people)
    deciders = list(get_user_model().objects.filter(username__in=REVIEWERS).order_by("username"))
    key = audit_key()
    now = timezone.now()
    digest = sha256_hex(EMAIL)
    signature = base64.b64encode(secrets.token_bytes(64)).decode()
    now = now.astimezone(UTC)
    waiting_snapshot = encoded(_snapshot("tools", 2, "awaiting_approval", None))
    done_snapshot = encoded(_snapshot("done", 4, "done", "Emailed Ada."))
    model, email, empty_list, empty_dict = encoded(MODEL), encoded(EMAIL), encoded([]), encoded({})
    result = encoded({"sent": True, "id": "m-1"})
    tables = {
        "runs": Table(Run, connection),
        "attempts": Table(Attempt, connection),
        "messages": Table(Message, connection, skip_pk=True),
        "checkpoints": Table(Checkpoint, connection),
        "approvals": Table(ApprovalRequest, connection),
        "decisions": Table(Decision, connection),
        "effects": Table(SideEffect, connection, skip_pk=True),
        "events": Table(DeskEvent, connection, skip_pk=True),
        "audit": Table(AuditEvent, connection),
    }
    counts = dict.fromkeys(tables, 0)
    written = 0
    span = 89 * 86400 / max(count, 1)
    while written < count:
        if budget is not None and time.monotonic() - started > budget:
            break
        n = min(batch, count - written)
        with transaction.atomic():
            # Attempts and audit rows take their ids here (the others need the attempts'; the
            # chain's hashes cover the ids), under the locks their writers take.
            serialize_writers()
            attempt_id = Attempt.objects.order_by("-id").values_list("id", flat=True).first() or 0
            audit_id, prev = AuditEvent.objects.order_by("-id").values_list("id", "hash").first() or (
                0,
                GENESIS,
            )
            first_audit = audit_id + 1
            for i in range(written, written + n):
                # Oldest first, spread over 89 days up to a day ago: before the runs measured now.
                at = now - timedelta(days=90) + timedelta(seconds=i * span)

                def later(seconds: float, at=at):
                    return at + timedelta(seconds=seconds)

                submitter = submitters[i % len(submitters)]
                decider = deciders[i % len(deciders)]
                reviewers, assignees, extras = _assignment(i)
                ended = RunStatus.SUCCEEDED
                if i % 50 == 7:
                    ended = RunStatus.FAILED
                elif i % 50 == 13:
                    ended = RunStatus.CANCELLED
                run_id = uuid.uuid4()
                text = f"Tell Ada her refund #{i} is on its way."
                tables["runs"].add(
                    id=run_id,
                    agent=AGENTS[i % len(AGENTS)],
                    input=text,
                    model=model,
                    reviewers=reviewers,
                    approval_ttl_seconds=86400,
                    submitted_by_id=submitter.pk,
                    status=ended,
                    output="Emailed Ada." if ended == RunStatus.SUCCEEDED else None,
                    error="the tool's service stayed down" if ended == RunStatus.FAILED else None,
                    error_kind="unavailable" if ended == RunStatus.FAILED else "",
                    lease_epoch=2,
                    revision=7,
                    created_at=at,
                    updated_at=later(40),
                )
                first, second = attempt_id + 1, attempt_id + 2
                attempt_id += 2
                for pk, number, offset in ((first, 1, 0), (second, 2, 30)):
                    tables["attempts"].add(
                        id=pk,
                        run_id=run_id,
                        number=number,
                        lease_epoch=number,
                        worker="celery@history",
                        status=AttemptStatus.RELEASED,
                        started_at=later(offset),
                        expires_at=later(offset + 60),
                        ended_at=later(offset + 1),
                    )
                call = {
                    "id": "call_0",
                    "type": "function",
                    "function": {"name": "send_email", "arguments": json.dumps(EMAIL)},
                }
                bodies = [
                    {"role": "user", "content": text},
                    {"role": "assistant", "content": None, "tool_calls": [call]},
                    {"role": "tool", "tool_call_id": "call_0", "content": '{"sent": true, "id": "m-1"}'},
                    {"role": "assistant", "content": "Emailed Ada."},
                ]
                for position, body in enumerate(bodies):
                    tables["messages"].add(
                        run_id=run_id,
                        position=position,
                        role=body["role"],
                        body=body,
                        created_at=later(position),
                    )
                waiting, done = uuid.uuid4(), uuid.uuid4()
                for pk, attempt, number, size_, snapshot, offset in (
                    (waiting, first, 1, 2, waiting_snapshot, 1),
                    (done, second, 2, 4, done_snapshot, 31),
                ):
                    tables["checkpoints"].add(
                        id=pk,
                        run_id=run_id,
                        attempt_id=attempt,
                        number=number,
                        schema_version=SCHEMA_VERSION,
                        message_count=size_,
                        snapshot=snapshot,
                        created_at=later(offset),
                    )
                approval_id = uuid.uuid4()
                cancelled = ended == RunStatus.CANCELLED
                handed = extras.get("handed_over_at")
                tables["approvals"].add(
                    id=approval_id,
                    run_id=run_id,
                    attempt_id=first,
                    checkpoint_id=waiting,
                    tool_call_id="call_0",
                    tool="send_email",
                    arguments=email,
                    arguments_sha256=digest,
                    assignees=assignees,
                    expires_at=later(86400),
                    status=ApprovalStatus.CANCELLED if cancelled else ApprovalStatus.APPROVED,
                    escalation_level=extras.get("escalation_level", 0),
                    handover_note=extras.get("handover_note", ""),
                    handed_over_at=later(10) if handed else None,
                    handed_over_by_id=deciders[0].pk if handed else None,
                    created_at=later(1),
                    updated_at=later(29),
                )
                if not cancelled:
                    decision_id = uuid.uuid4()
                    tables["decisions"].add(
                        id=decision_id,
                        request_id=approval_id,
                        verdict=Verdict.APPROVE,
                        reason="ok",
                        reviewer_id=decider.pk,
                        arguments=email,
                        arguments_sha256=digest,
                        decided_at=later(29),
                        not_after=later(629),
                        nonce=secrets.token_hex(16),
                        payload={
                            "approval_id": str(approval_id),
                            "run_id": str(run_id),
                            "tool": "send_email",
                            "verdict": "approve",
                            "arguments_sha256": digest,
                        },
                        signature=signature,
                        key_id="history",
                        consumed_at=later(30),
                    )
                    tables["effects"].add(
                        run_id=run_id,
                        idempotency_key=f"{run_id}:call_0:send_email",
                        tool_call_id="call_0",
                        tool="send_email",
                        status=EffectStatus.CONFIRMED,
                        decision_id=decision_id,
                        attempt_id=second,
                        result=result,
                        created_at=later(30),
                        updated_at=later(31),
                    )
                for offset, kind, data in (
                    (0, "run.created", {"id": str(run_id), "status": "queued"}),
                    (
                        1,
                        "approval.created",
                        {"id": str(approval_id), "run": str(run_id), "tool": "send_email"},
                    ),
                    (
                        29,
                        "approval.updated",
                        {"id": str(approval_id), "status": "cancelled" if cancelled else "approved"},
                    ),
                    (31, "run.updated", {"id": str(run_id), "status": str(ended)}),
                ):
                    tables["events"].add(
                        type=kind, run_id=run_id, audience=empty_list, data=data, created_at=later(offset)
                    )
                for offset, actor, action, subject_type, subject_id in (
                    (0, submitter, "run.submitted", "run", run_id),
                    (1, None, "approval.requested", "approval", approval_id),
                    (
                        29,
                        None if cancelled else decider,
                        "approval.cancelled" if cancelled else "decision.approve",
                        "approval",
                        approval_id,
                    ),
                    (31, None, f"run.{ended}", "run", run_id),
                ):
                    audit_id += 1
                    fields = {
                        "actor_id": actor.pk if actor else None,
                        "actor_name": actor.get_username() if actor else "system",
                        "at": later(offset),
                        "action": action,
                        "subject_type": subject_type,
                        "subject_id": str(subject_id),
                    }
                    row_prev, prev = prev, _audit_hash(key, pk=audit_id, prev=prev, **fields)
                    tables["audit"].add(
                        id=audit_id,
                        data=empty_dict,
                        version=ChainVersion.KEYED,
                        prev_hash=row_prev,
                        hash=prev,
                        **fields,
                    )
            for name, table in tables.items():
                counts[name] += table.flush()
            if connection.vendor == "postgresql":
                with connection.cursor() as cursor:
                    for sql in connection.ops.sequence_reset_sql(no_style(), [Attempt, AuditEvent]):
                        cursor.execute(sql)
            check = AuditEvent.objects.get(pk=first_audit)
            assert check.hash == row_hash(check, key=key), "bench seeding wrote a broken audit chain"
        written += n
    seconds = time.monotonic() - started
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # What autovacuum does soon after such a load: the planner's statistics for the new rows.
            cursor.execute("ANALYZE")
        elif not connection.in_atomic_block:  # (a test's transaction: nothing to fold yet)
            # A history that accrued over months was checkpointed as it went: fold the load's
            # write-ahead log into the database rather than have every reader search it.
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    analyze = time.monotonic() - started - seconds
    return {"runs": written, "rows": counts, "seconds": seconds, "analyze_seconds": analyze}


def _snapshot(step: str, message_count: int, status: str, output: str | None) -> dict[str, Any]:
    """The snapshot the loop would write at this point, as it writes it (v5: defaults left out)."""
    from agents.state import AgentState, CallState, CallStatus, Step

    call = CallState(
        id="call_0",
        name="send_email",
        arguments=EMAIL,
        status=CallStatus(status),
        result={"sent": True, "id": "m-1"} if status == "done" else None,
    )
    return AgentState(
        step=Step(step),
        message_count=message_count,
        batch=[call],
        model_calls=1 if step != "done" else 2,
        output=output,
    ).to_snapshot()
