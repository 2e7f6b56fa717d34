"""One thread per worker process renews the leases it holds (no thread per task)."""

from __future__ import annotations

import threading
import time

import pytest
from django.db.models import F

from reviewdesk.runs.claim import run_claim
from reviewdesk.runs.leases import LeaseKeeper
from reviewdesk.runs.models import Run
from reviewdesk.runs.services import run_submit
from tests.conftest import SEND_EMAIL_SCRIPT

pytestmark = pytest.mark.django_db(transaction=True)


def claimed(personas):
    run = run_submit(
        submitter=personas.carol,
        agent="demo",
        input="Tell Ada.",
        model={"provider": "scripted", "script": SEND_EMAIL_SCRIPT},
    )
    attempt = run_claim(run_id=run.id, worker="w")
    return attempt, Run.objects.get(pk=run.pk).lease_expires_at


def wait_until(predicate, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_one_thread_renews_every_lease_the_process_holds(personas, settings):
    settings.DESK_LEASE_SECONDS = 1  # a renewal every third of a second
    (first, first_expiry), (second, second_expiry) = claimed(personas), claimed(personas)
    with LeaseKeeper(first, cancel_epoch=0) as one, LeaseKeeper(second, cancel_epoch=0) as two:
        renewed = wait_until(
            lambda: (
                Run.objects.get(pk=first.run_id).lease_expires_at > first_expiry
                and Run.objects.get(pk=second.run_id).lease_expires_at > second_expiry
            )
        )
        renewers = [t for t in threading.enumerate() if t.name == "lease-renewer"]
    assert renewed
    assert len(renewers) == 1
    assert not one.lost.is_set() and not two.lost.is_set()


def test_a_lease_gone_is_reported_lost_and_the_others_are_still_renewed(personas, settings):
    settings.DESK_LEASE_SECONDS = 1
    (cancelled, _), (kept, _) = claimed(personas), claimed(personas)
    with LeaseKeeper(cancelled, cancel_epoch=0) as gone, LeaseKeeper(kept, cancel_epoch=0) as held:
        Run.objects.filter(pk=cancelled.run_id).update(cancel_epoch=F("cancel_epoch") + 1)  # a cancel
        assert wait_until(gone.lost.is_set)
        before = Run.objects.get(pk=kept.run_id).lease_expires_at
        assert wait_until(lambda: Run.objects.get(pk=kept.run_id).lease_expires_at > before)
    assert not held.lost.is_set()


def test_an_error_escaping_one_renewal_does_not_stop_the_others(personas, settings, monkeypatch):
    """The process has one renewal thread: if it died, no lease here would be renewed again."""
    settings.DESK_LEASE_SECONDS = 1
    (broken, _), (kept, kept_expiry) = claimed(personas), claimed(personas)
    real_beat = LeaseKeeper.beat

    def beat(keeper):
        if keeper.attempt.pk == broken.pk:
            raise RuntimeError("closing a broken connection failed")
        real_beat(keeper)

    monkeypatch.setattr(LeaseKeeper, "beat", beat)
    with LeaseKeeper(broken, cancel_epoch=0), LeaseKeeper(kept, cancel_epoch=0) as held:
        first = wait_until(lambda: Run.objects.get(pk=kept.run_id).lease_expires_at > kept_expiry)
        later = Run.objects.get(pk=kept.run_id).lease_expires_at
        # Renewed again after the broken keeper's beats have raised several times.
        again = wait_until(lambda: Run.objects.get(pk=kept.run_id).lease_expires_at > later)
    assert first and again and not held.lost.is_set()


def test_a_renewal_thread_that_died_is_replaced_by_the_next_lease(personas, settings):
    from reviewdesk.runs import leases

    settings.DESK_LEASE_SECONDS = 1
    (attempt, expiry) = claimed(personas)
    dead = threading.Thread(target=lambda: None)
    dead.start()
    dead.join()
    leases._renewer._thread = dead  # as if the thread had ended
    with LeaseKeeper(attempt, cancel_epoch=0):
        renewed = wait_until(lambda: Run.objects.get(pk=attempt.run_id).lease_expires_at > expiry)
    assert renewed
