"""Celery tasks: ids in, the database re-read, idempotent under duplicates."""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

from celery import shared_task, signals
from django.conf import settings

from reviewdesk.accounts.devicekeys import device_trust_problems
from reviewdesk.approvals.signing import OUT_OF_REACH, signing_key_reach, worker_key_problems
from reviewdesk.audit.keys import audit_key_problem
from reviewdesk.lib.deployment import is_production_configuration, refuse_to_start
from reviewdesk.runs.execution import run_execute
from reviewdesk.runs.sweeper import runs_sweep
from reviewdesk.runs.transitions import RESUME_TASK, RUN_TASK

logger = logging.getLogger(__name__)


def _worker_name(task: Any) -> str:
    return f"{task.request.hostname or socket.gethostname()}:{os.getpid()}:{task.request.id}"


def execute(task: Any, run_id: str) -> None:
    run_execute(run_id=run_id, worker=_worker_name(task))


# One body under two names: `run_execute` re-reads the run and takes it wherever it stands, so a
# first start and a resume do the same work. The names stay apart for whoever reads the queue
# and the worker's log: "resume" says the run goes on after a human answered.
run = shared_task(bind=True, name=RUN_TASK)(execute)
resume = shared_task(bind=True, name=RESUME_TASK)(execute)


@shared_task(name="runs.sweep")
def sweep() -> dict[str, int]:
    return runs_sweep()


# --- Keys, checked when a worker starts (this module is what workers import) ---------------


@signals.worker_init.connect
def refuse_to_hold_signing_keys(**_: object) -> None:
    """A production worker holds public keys only, read-only: it could forge approvals otherwise.

    Runs in the worker's main process before its pool starts; SystemExit is not swallowed by
    Celery's signal dispatch (only Exception is), so the worker exits with EX_CONFIG.
    """
    if not is_production_configuration():
        return
    problems = worker_key_problems() + device_trust_problems()
    if not problems and signing_key_reach() == OUT_OF_REACH:
        logger.info(
            "The signing key %s is out of this worker's reach (permission denied), as it should be.",
            settings.DESK_SIGNING_KEY_FILE,
        )
    if problems:
        refuse_to_start(
            "worker",
            "; ".join(problems) + ". Run workers as a user that cannot read the private key, with a "
            "read-only keyring (docs/running.md: web and worker as different users).",
        )


@signals.worker_init.connect
def refuse_to_start_without_the_audit_key(**_: object) -> None:
    """A production worker audits every step it commits: without the audit key it would take a
    run and refuse its first audited write. It exits with EX_CONFIG before its pool starts."""
    problem = audit_key_problem()
    if problem is not None:
        refuse_to_start("worker", problem)
