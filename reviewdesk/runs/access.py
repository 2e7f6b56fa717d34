"""Who may see a run (`runs_visible_to`: admins, its submitter, and reviewers as the run and
its approvals' targets name them), and whom a run's desk events go to. `run_get_visible`
answers "missing" and "not yours" alike."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, cast

from django.db.models import Model, OuterRef, Q, QuerySet

from reviewdesk.accounts.roles import is_admin, is_reviewer
from reviewdesk.accounts.targets import targets_of, users_named
from reviewdesk.lib.db import ExistsPerRow, NamesAny
from reviewdesk.lib.errors import NotFound
from reviewdesk.runs.models import Run

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def run_audience(run: Run) -> list[int]:
    """User ids that desk events about this run go to; empty means every reviewer. An external
    run may name groups ("group:finance"): their members."""
    if not run.reviewers:
        return []
    return list(users_named(run.reviewers).values_list("id", flat=True))


def runs_visible_to(user: User, *, pk: Any = None) -> QuerySet[Run]:
    """Admins see every run; submitters their own; a reviewer also the runs open to any
    reviewer or assigned to them, and the runs with an approval routed, handed over or
    escalated to them (never another reviewer's assigned run). `pk`: only that run.

    One query, whatever the history: the reviewer's tests are per run, in the database
    (a page of runs reads a page of runs, not every approval ever raised)."""
    runs = Run.objects.select_related("submitted_by")
    if pk is not None:
        runs = runs.filter(pk=pk)
    if is_admin(user):
        return runs
    if not is_reviewer(user):
        return runs.filter(submitted_by=user)
    return runs.filter(
        Q(submitted_by=user)
        | Q(reviewers=[])
        | Q(NamesAny("reviewers", [user.get_username()]))
        | Q(ExistsPerRow(_approvals_naming(targets_of(user)).filter(run=OuterRef("pk"))))
    )


def _approvals_naming(targets: Iterable[str]) -> QuerySet:
    """The approvals whose targets (assignees, set by routing, a hand-over or an escalation)
    name one of `targets`. Read through the reverse relation's model, so run data imports
    nothing from approvals; `exclude(assignees=[])` is the partial index approval_targeted's
    condition (ApprovalRequest.Meta.indexes)."""
    approvals = cast("type[Model]", Run._meta.get_field("approvals").related_model)._default_manager
    return approvals.exclude(assignees=[]).filter(NamesAny("assignees", targets))


def run_get_visible(*, run_id: Any, user: User) -> Run:
    """The run, or NotFound whether it is missing or not the user's to see."""
    run = runs_visible_to(user, pk=run_id).first()
    if run is None:
        raise NotFound("no such run")
    return run
