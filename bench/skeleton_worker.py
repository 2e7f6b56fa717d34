"""The desk's Celery app (its settings) working the skeleton's two tasks:
`celery -A bench.skeleton_worker worker`."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.skeleton_settings")

from reviewdesk.celery import app

app.autodiscover_tasks(["bench"], related_name="skeleton_tasks")

__all__ = ["app"]
