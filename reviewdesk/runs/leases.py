"""Keeping a lease alive while a worker holds a run."""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

from django.conf import settings
from django.db import connection
from django.utils import timezone

from reviewdesk.runs.models import Attempt, Run, RunStatus

logger = logging.getLogger(__name__)


class LeaseKeeper:
    """Renews the attempt's lease every third of its length, from a background thread.

    The renewal is a compare-and-set on the lease and cancel epochs: once it
    fails (the lease expired and another worker took the run, or the run was
    cancelled) `lost` is set and renewal stops; the worker's next fenced write
    is then rejected.
    """

    def __init__(self, attempt: Attempt, *, cancel_epoch: int) -> None:
        self.attempt = attempt
        self.cancel_epoch = cancel_epoch
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"lease-{attempt.run_id}", daemon=True)

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def renew(self) -> bool:
        expires_at = timezone.now() + timedelta(seconds=settings.DESK_LEASE_SECONDS)
        renewed = Run.objects.filter(
            pk=self.attempt.run_id,
            status=RunStatus.RUNNING,
            lease_epoch=self.attempt.lease_epoch,
            cancel_epoch=self.cancel_epoch,
        ).update(lease_expires_at=expires_at)
        if renewed:
            Attempt.objects.filter(pk=self.attempt.pk).update(expires_at=expires_at)
        return bool(renewed)

    def _run(self) -> None:
        interval = max(settings.DESK_LEASE_SECONDS / 3, 0.2)
        try:
            while not self._stop.wait(interval):
                try:
                    if not self.renew():
                        logger.warning(
                            "attempt %s lost its lease on run %s", self.attempt.number, self.attempt.run_id
                        )
                        self.lost.set()
                        return
                except Exception:  # a database hiccup: try again next beat, the lease has slack
                    logger.exception("lease renewal failed for run %s", self.attempt.run_id)
                    connection.close_if_unusable_or_obsolete()  # reconnect on the next beat
        finally:
            connection.close()  # this thread's own connection
