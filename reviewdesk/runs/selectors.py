from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib.auth import get_user_model
from django.db.models import Q, QuerySet

from reviewdesk.accounts.roles import is_admin, is_reviewer
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
    reviewer or assigned to them (never another reviewer's assigned run)."""
    runs = Run.objects.select_related("submitted_by")
    if is_admin(user):
        return runs
    if not is_reviewer(user):
        return runs.filter(submitted_by=user)
    assigned_to_user = ids_naming(runs, "reviewers", user.get_username())
    return runs.filter(Q(submitted_by=user) | Q(reviewers=[]) | Q(id__in=assigned_to_user))


def run_get_for_user(*, run_id: Any, user: User) -> Run:
    """The run, or NotFound whether it is missing or not the user's to see."""
    run = runs_visible_to(user).filter(pk=run_id).first()
    if run is None:
        raise NotFound("no such run")
    return run
