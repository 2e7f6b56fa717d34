"""Celery tasks: ids in, the database re-read, idempotent under duplicates."""

from __future__ import annotations

import os
import socket

from celery import shared_task

from reviewdesk.runs import services


def _worker_name(task) -> str:
    return f"{task.request.hostname or socket.gethostname()}:{os.getpid()}:{task.request.id}"


@shared_task(bind=True, name="runs.run")
def run(self, run_id: str) -> None:
    services.run_execute(run_id=run_id, worker=_worker_name(self))


@shared_task(bind=True, name="runs.resume")
def resume(self, run_id: str) -> None:
    services.run_execute(run_id=run_id, worker=_worker_name(self))


@shared_task(name="runs.sweep")
def sweep() -> dict[str, int]:
    return services.runs_sweep()
