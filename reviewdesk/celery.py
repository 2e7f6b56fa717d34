import os
import sys

from celery import Celery, signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reviewdesk.settings")

app = Celery("reviewdesk")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@signals.task_prerun.connect(weak=False)
@signals.task_postrun.connect(weak=False)
def close_old_connections(task=None, **_: object) -> None:
    """Per task what Django does per request: drop a connection past DESK_DB_CONN_MAX_AGE or
    unusable after an error, keep the rest (CELERY_DB_REUSE_MAX keeps Celery from closing all).
    Not for eager tasks, which run inside the caller's transaction (as Celery's fixup does)."""
    if task is not None and getattr(task.request, "is_eager", False):
        return
    from django.db import close_old_connections as close

    close()


def _refuse_to_start_without_the_agents(process: str) -> None:
    """A worker or beat whose DESK_AGENTS modules failed to load (reviewdesk/agent_modules) exits
    with EX_CONFIG and the module's name before it takes a task: SystemExit is not swallowed by
    Celery's signal dispatch (only Exception is)."""
    import django

    django.setup()  # done already in a worker (Celery's Django fixup); beat sets it up here
    from reviewdesk.agent_modules.loading import agents_problem, refuse_to_start_if_broken

    if agents_problem() is not None:
        sys.stderr = sys.__stderr__  # beat has redirected stderr to a logger that never writes it
    refuse_to_start_if_broken(process)


@signals.worker_init.connect(weak=False)
def worker_refuses_to_start_without_the_agents(**_: object) -> None:
    _refuse_to_start_without_the_agents("worker")


@signals.beat_init.connect(weak=False)  # before beat's audit check below: receivers run in order
def beat_refuses_to_start_without_the_agents(**_: object) -> None:
    _refuse_to_start_without_the_agents("beat")


@signals.beat_init.connect(weak=False)
def check_the_audit_chain_at_start(**_: object) -> None:
    """Beat's full check of the audit chain (`audit.check`) runs once as beat starts, then every
    DESK_AUDIT_CHECK_SECONDS: a fresh install or a restart would otherwise leave the audit page
    without a record of one (amber) for the first interval."""
    app.send_task("audit.check")
