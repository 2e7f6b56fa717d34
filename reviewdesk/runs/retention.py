"""Checkpoint retention (DESIGN.md, "Checkpoint"): every checkpoint while a run is open; once it
has ended, its last `DESK_CHECKPOINTS_KEPT_AFTER_END` and any an approval names. The message
log stays whole: checkpoints hold counts into it, not copies of it (runs/checkpoints.py), so a kept
checkpoint loads the same with or without the ones pruned before it.

Pruning happens in the transaction that ends the run, under its row lock: a retry or a
follow-up, which lock the row too, either see every checkpoint or only the kept ones, never a
run open again with its history half pruned. `manage.py prune_checkpoints` prunes runs that
ended before this was built, or while the setting was larger.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef

from reviewdesk.approvals.models import ApprovalRequest
from reviewdesk.runs.models import ENDED, Checkpoint, Run


def kept_after_end() -> int:
    """How many of an ended run's latest checkpoints are kept: at least one, which a follow-up
    and a retry continue from."""
    return max(1, settings.DESK_CHECKPOINTS_KEPT_AFTER_END)


def checkpoints_prune(run: Run, *, last_number: int | None = None) -> int:
    """Delete the ended `run`'s checkpoints older than its last N that no approval names; the
    number deleted. The caller holds the run's row lock, in the transaction that ends it.

    `last_number`, the run's highest checkpoint number when the caller knows it (the worker's
    store does): a run with no more than N checkpoints then costs no statement."""
    assert run.status in ENDED, "only an ended run's checkpoints are pruned"
    keep = kept_after_end()
    if last_number is not None and last_number <= keep:
        return 0
    newest = Checkpoint.objects.filter(run_id=run.pk).order_by("-number").values_list("number", flat=True)
    older = Checkpoint.objects.filter(run_id=run.pk).exclude(number__in=newest[:keep])
    # An approval's checkpoint is where its decision is bound (and PROTECTed): it stays.
    named = ApprovalRequest.objects.filter(checkpoint_id=OuterRef("pk"))
    deleted, _ = older.exclude(Exists(named)).delete()
    return deleted


def ended_runs_prune_batch(*, after: Any = None, batch: int = 200) -> tuple[Any, int, int]:
    """Prune up to `batch` ended runs' checkpoints in one transaction, in id order from after
    `after`: (the last run id looked at, or None when there were none; runs pruned;
    checkpoints deleted). A run reopened meanwhile (a follow-up, a retry) is skipped: its row
    is read locked and its status checked again."""
    ids = Run.objects.filter(status__in=ENDED).order_by("pk").values_list("pk", flat=True)
    page = list((ids.filter(pk__gt=after) if after is not None else ids)[:batch])
    if not page:
        return None, 0, 0
    runs = deleted = 0
    with transaction.atomic():
        for run in Run.objects.select_for_update().filter(pk__in=page, status__in=ENDED).order_by("pk"):
            gone = checkpoints_prune(run)
            runs, deleted = runs + bool(gone), deleted + gone
    return page[-1], runs, deleted
