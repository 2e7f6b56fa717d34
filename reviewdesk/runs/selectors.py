from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib.auth import get_user_model
from django.db.models import Q, QuerySet

from reviewdesk.accounts.roles import is_admin, is_reviewer
from reviewdesk.accounts.targets import targets_of
from reviewdesk.db import ids_naming
from reviewdesk.errors import NotFound
from reviewdesk.runs.models import Run

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def run_audience(run: Run) -> list[int]:
    """User ids that desk events about this run go to; empty means every reviewer."""
    if not run.reviewers:
        return []
    return list(get_user_model().objects.filter(username__in=run.reviewers).values_list("id", flat=True))


def runs_visible_to(user: User) -> QuerySet[Run]:
    """Admins see every run; submitters their own; a reviewer also the runs open to any
    reviewer or assigned to them, and the runs with an approval routed, handed over or
    escalated to them (never another reviewer's assigned run)."""
    runs = Run.objects.select_related("submitted_by")
    if is_admin(user):
        return runs
    if not is_reviewer(user):
        return runs.filter(submitted_by=user)
    assigned_to_user = ids_naming(runs, "reviewers", user.get_username())
    return runs.filter(
        Q(submitted_by=user) | Q(reviewers=[]) | Q(id__in=assigned_to_user) | Q(id__in=_runs_routed_to(user))
    )


def _runs_routed_to(user: User) -> list:
    """Ids of runs with an approval whose targets (assignees) name `user` or a group of theirs.

    Through the reverse relation, so run data imports nothing from approvals; the lists are
    short and JSON containment is not portable to SQLite, so they are matched here."""
    targets = targets_of(user)
    # Not .exclude(approvals__assignees=[]): on a many-valued relation that drops the whole run
    # when any one of its approvals is open to everyone.
    pairs = Run.objects.filter(approvals__isnull=False)
    return list(
        {
            run_id
            for run_id, names in pairs.values_list("id", "approvals__assignees")
            if targets & set(names or [])
        }
    )


def run_get_for_user(*, run_id: Any, user: User) -> Run:
    """The run, or NotFound whether it is missing or not the user's to see."""
    run = runs_visible_to(user).filter(pk=run_id).first()
    if run is None:
        raise NotFound("no such run")
    return run
