"""The floors: a bare Celery app (no Django) and a bare Channels consumer.

Celery gets the desk's own settings (acks_late, reject on worker lost, prefetch 1) on the
desk's broker; the consumer sits on the desk's channel layer. Started by the harness only.
"""

from __future__ import annotations

import json
import os
import time

import redis
from celery import Celery

BROKER = os.environ["BENCH_BROKER_URL"]  # set by bench.stack: the desk's own broker, never a guess

app = Celery("bench-floor", broker=BROKER)
app.conf.update(
    task_default_queue=os.environ.get("BENCH_FLOOR_QUEUE", "bench-floor"),
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    task_ignore_result=True,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


def _redis() -> redis.Redis:
    if BROKER.startswith("redis+socket://"):
        return redis.Redis(unix_socket_path=BROKER.removeprefix("redis+socket://"))
    return redis.Redis.from_url(BROKER)


_client: redis.Redis | None = None


def client() -> redis.Redis:
    global _client
    if _client is None:
        _client = _redis()
    return _client


@app.task(name="floor.hop")
def hop(sent: float) -> None:
    """One Celery hop: enqueue → start."""
    client().rpush("bench:floor:hop", json.dumps([sent, time.time()]))


@app.task(name="floor.noop")
def noop() -> None:
    """Nothing, and one counter so the harness knows when all have run."""
    pipe = client().pipeline(transaction=False)
    pipe.incr("bench:floor:noop")
    pipe.set("bench:floor:noop_at", time.time())
    pipe.execute()
