"""Keeping a lease alive while a worker holds a run."""

from __future__ import annotations

import logging
import os
import threading
import time
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
    is then rejected. One thread per process renews every keeper (`_Renewer`):
    a task does not start a thread of its own.
    """

    def __init__(self, attempt: Attempt, *, cancel_epoch: int) -> None:
        self.attempt = attempt
        self.cancel_epoch = cancel_epoch
        self.lost = threading.Event()
        self.interval = max(settings.DESK_LEASE_SECONDS / 3, 0.2)

    def __enter__(self) -> LeaseKeeper:
        _renewer.add(self)
        return self

    def __exit__(self, *exc_info) -> None:
        _renewer.remove(self)  # waits for a renewal of this lease under way

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

    def beat(self) -> None:
        """One renewal, on the renewer's thread; sets `lost` when the lease is gone."""
        try:
            if not self.renew():
                logger.warning(
                    "attempt %s lost its lease on run %s", self.attempt.number, self.attempt.run_id
                )
                self.lost.set()
        except Exception:  # a database hiccup: try again next beat, the lease has slack
            logger.exception("lease renewal failed for run %s", self.attempt.run_id)
        finally:
            # The renewer's own connection; beats are a third of a lease apart. Closing a broken
            # one can raise too, and nothing may escape to the process's one renewal thread.
            try:
                connection.close()
            except Exception:
                logger.exception("closing the lease renewer's connection failed")


class _Renewer:
    """The process's one renewal thread, started on first use (after any fork)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._cond = threading.Condition()
        self._due: dict[LeaseKeeper, float] = {}  # keeper -> when it renews next (monotonic)
        self._busy: LeaseKeeper | None = None
        self._thread: threading.Thread | None = None  # a forked child has none: reset runs there

    def add(self, keeper: LeaseKeeper) -> None:
        with self._cond:
            # Started on first use, and again if it ever died: every lease here depends on it.
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="lease-renewer", daemon=True)
                self._thread.start()
            self._due[keeper] = time.monotonic() + keeper.interval
            self._cond.notify_all()

    def remove(self, keeper: LeaseKeeper) -> None:
        with self._cond:
            self._due.pop(keeper, None)
            self._cond.wait_for(lambda: self._busy is not keeper, timeout=10)

    def _run(self) -> None:
        while True:
            with self._cond:
                now = time.monotonic()
                keeper = min(self._due, key=self._due.__getitem__, default=None)
                if keeper is None or self._due[keeper] > now:
                    self._cond.wait(self._due[keeper] - now if keeper is not None else None)
                    continue
                self._due[keeper] = now + keeper.interval
                self._busy = keeper
            try:
                keeper.beat()
            except Exception:  # beat catches its own; this thread must outlive any that escapes
                logger.exception("lease renewal raised for run %s", keeper.attempt.run_id)
            finally:
                with self._cond:
                    self._busy = None
                    if keeper.lost.is_set():
                        self._due.pop(keeper, None)  # renewal stops once the lease is gone
                    self._cond.notify_all()


_renewer = _Renewer()
# A child forked while the parent's renewer held its lock would wait on it forever: start afresh.
os.register_at_fork(after_in_child=_renewer.reset)
