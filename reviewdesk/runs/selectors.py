from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, cast

from django.contrib.auth import get_user_model
from django.db.models import Model, OuterRef, Q, QuerySet

from reviewdesk.accounts.roles import is_admin, is_reviewer
from reviewdesk.accounts.targets import targets_of
from reviewdesk.approvals.models import ApprovalRequest
from reviewdesk.lib.db import ExistsPerRow, NamesAny
from reviewdesk.lib.db_rows import Columns, column, fetchone, for_update_of, prep, table
from reviewdesk.lib.errors import NotFound
from reviewdesk.runs.models import Run

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def run_locked(run_pk: Any, *, with_submitter: bool = False, of_approval: bool = False) -> Run:
    """The run, its row locked until the transaction ends (not its submitter's), with its
    submitter when asked: one hand-written statement, as the ORM's select_for_update read but
    not compiled each time (issue 11: a decision and a worker's finish each take one). With
    `of_approval`, `run_pk` is the id of one of its approval requests. Raises Run.DoesNotExist,
    as the ORM's `get` does."""
    user_model = get_user_model()
    run, user = Columns.of(Run, "r"), Columns.of(user_model, "u")
    join = ""
    if with_submitter:
        join = (
            f"JOIN {table(user_model)} u ON u.{column(user_model, 'id')} = r.{column(Run, 'submitted_by')} "
        )
    key = "%s"
    if of_approval:
        request = ApprovalRequest
        key = f"(SELECT {column(request, 'run')} FROM {table(request)} WHERE {column(request, 'id')} = %s)"
    sql = (
        f"SELECT {run.sql}{', ' + user.sql if with_submitter else ''} FROM {table(Run)} r {join}"
        f"WHERE r.{column(Run, 'id')} = {key}{for_update_of('r')}"
    )
    row = fetchone(sql, [prep(ApprovalRequest if of_approval else Run, "id", run_pk)])
    if row is None:
        raise Run.DoesNotExist(f"run {run_pk} does not exist")
    locked = run.build(row)
    if with_submitter:
        locked.submitted_by = user.build(row, run.width)
    return locked


def run_audience(run: Run) -> list[int]:
    """User ids that desk events about this run go to; empty means every reviewer."""
    if not run.reviewers:
        return []
    return list(get_user_model().objects.filter(username__in=run.reviewers).values_list("id", flat=True))


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
    condition (approvals migration 0010)."""
    approvals = cast("type[Model]", Run._meta.get_field("approvals").related_model)._default_manager
    return approvals.exclude(assignees=[]).filter(NamesAny("assignees", targets))


def run_get_for_user(*, run_id: Any, user: User) -> Run:
    """The run, or NotFound whether it is missing or not the user's to see."""
    run = runs_visible_to(user, pk=run_id).first()
    if run is None:
        raise NotFound("no such run")
    return run
