"""Timestamps and counters from inside the desk's processes, for the harness only.

Loaded by `bench.desk_asgi` and `bench.desk_worker` (never by the desk itself), it records:
- when each transaction committed, and for every desk event pushed on commit, the commit
  time of the transaction that wrote it (`bench:events`);
- each Celery task's publish time, start and end, and the statements and transactions it
  ran (`bench:tasks`);
- each process's running totals of statements and transactions (`bench:counters`).

Records are buffered and written to Redis by a background thread, off the measured path.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from typing import Any

_local = threading.local()
_lock = threading.Lock()
_buffer: list[tuple[str, str]] = []
counters: Counter[str] = Counter()
_role = "?"
_installed = False


def redis_client():
    """A client on the desk's Redis (the embedded socket or REDIS_URL)."""
    import redis
    from django.conf import settings

    if settings.EMBEDDED_REDIS_SOCKET:
        return redis.Redis(unix_socket_path=str(settings.EMBEDDED_REDIS_SOCKET))
    return redis.Redis.from_url(settings.REDIS_URL)


def record(stream: str, /, **fields: Any) -> None:
    with _lock:
        _buffer.append((stream, json.dumps(fields)))


def _flush_forever() -> None:
    client = redis_client()
    field = f"{_role}:{os.getpid()}"
    while True:
        time.sleep(0.05)
        with _lock:
            batch = _buffer[:]
            _buffer.clear()
            totals = dict(counters)
        pipe = client.pipeline(transaction=False)
        for key, value in batch:
            pipe.rpush(key, value)
        for name, value in totals.items():
            pipe.hset("bench:counters", f"{field}:{name}", value)
        pipe.execute()


def _count(connection) -> None:
    # connection_created fires on every reconnect of the same wrapper: count each statement once.
    if getattr(connection, "_bench_counted", False):
        return
    connection._bench_counted = True

    def wrapper(execute, sql, params, many, context):
        if not sql.lstrip().upper().startswith("BEGIN"):
            counters["statements"] += 1
            if connection.get_autocommit():
                counters["transactions"] += 1  # a statement outside atomic is its own transaction
        if "pg_advisory_xact_lock" not in sql:
            return execute(sql, params, many, context)
        # The writers' lock (reviewdesk/lib/db.py): how long this waited for it, and from when it
        # is held until the transaction ends (timed_commit / timed_rollback).
        asked = time.perf_counter()
        result = execute(sql, params, many, context)
        _local.locked_at = time.perf_counter()
        counters["lock_wait_us"] += int((_local.locked_at - asked) * 1e6)
        counters["locks"] += 1
        return result

    connection.execute_wrappers.append(wrapper)


def install(role: str) -> None:
    """Patch the commit, the push and the Celery signals of this process (idempotent)."""
    global _role, _installed
    if _installed:
        return
    _installed, _role = True, role
    from celery import signals
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.backends.signals import connection_created

    commit, rollback = BaseDatabaseWrapper.commit, BaseDatabaseWrapper.rollback

    def released() -> None:
        locked_at = getattr(_local, "locked_at", None)
        if locked_at is not None:
            counters["lock_hold_us"] += int((time.perf_counter() - locked_at) * 1e6)
            _local.locked_at = None

    def timed_commit(self):
        asked = time.perf_counter()
        commit(self)
        if getattr(_local, "locked_at", None) is not None:  # the part of the hold spent committing
            counters["lock_commit_us"] += int((time.perf_counter() - asked) * 1e6)
        _local.commit_at = time.time()
        counters["transactions"] += 1
        released()

    def timed_rollback(self):
        rollback(self)
        released()

    BaseDatabaseWrapper.commit = timed_commit  # type: ignore[method-assign]
    BaseDatabaseWrapper.rollback = timed_rollback  # type: ignore[method-assign]
    connection_created.connect(lambda sender, connection, **kw: _count(connection), weak=False)

    from reviewdesk.events import services as events

    push = events.event_push

    def timed_push(event):
        record(
            "bench:events",
            seq=event.id,
            type=event.type,
            commit=getattr(_local, "commit_at", None),
            push=time.time(),
            role=role,
        )
        push(event)

    events.event_push = timed_push

    @signals.before_task_publish.connect(weak=False)
    def stamp(headers=None, **kw):
        if headers is not None:
            headers["bench_sent"] = time.time()

    @signals.task_prerun.connect(weak=False)
    def started(task=None, args=None, **kw):
        _local.task = (time.time(), counters["statements"], counters["transactions"])

    @signals.task_postrun.connect(weak=False)
    def ended(task=None, args=None, **kw):
        start, statements, transactions = _local.task
        record(
            "bench:tasks",
            name=task.name,
            run=str(args[0]) if args else None,
            sent=getattr(task.request, "bench_sent", None),
            start=start,
            end=time.time(),
            statements=counters["statements"] - statements,
            transactions=counters["transactions"] - transactions,
            worker=task.request.hostname,
        )

    threading.Thread(target=_flush_forever, daemon=True, name="bench-probe").start()
