import os

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


@signals.beat_init.connect(weak=False)
def check_the_audit_chain_at_start(**_: object) -> None:
    """Beat's full check of the audit chain (`audit.check`) runs once as beat starts, then every
    DESK_AUDIT_CHECK_SECONDS: a fresh install or a restart would otherwise leave the audit page
    without a record of one (amber) for the first interval."""
    app.send_task("audit.check")
