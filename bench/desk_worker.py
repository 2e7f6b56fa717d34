"""The desk's Celery app with the harness's probe: `celery -A bench.desk_worker worker`."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reviewdesk.settings")

from celery.signals import worker_process_init

from reviewdesk.celery import app


@worker_process_init.connect(weak=False)
def _probe(**kwargs) -> None:
    # In each forked child: its own flush thread and counters.
    from bench import probe

    probe.install("worker")


__all__ = ["app"]
