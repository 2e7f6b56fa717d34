"""Reads about approvals: who may see them, and who may decide them (the worker's reads to resume are
in decision_reads)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db.models import Q, QuerySet

from reviewdesk.accounts.roles import is_admin, is_reviewer
from reviewdesk.accounts.targets import targets_of
from reviewdesk.approvals.models import (
    ApprovalRequest,
    ApprovalStatus,
)
from reviewdesk.approvals.routing import user_qualifies
from reviewdesk.lib.db import NamesAny
from reviewdesk.lib.errors import NotFound
from reviewdesk.runs.models import Run


def approvals_visible_to(
    user: Any, *, group_names: set[str] | None = None, related: bool = True, **lookups: Any
) -> QuerySet[ApprovalRequest]:
    """Admins see every approval; a reviewer those open to any reviewer or assigned to them.

    `lookups` narrow the rows (status="pending", pk=...); the assignment check is a condition
    on each row (NamesAny), so a page reads no more rows than its own and those it skips.
    `group_names`: the user's groups, when the caller read them already. `related=False`: the
    rows alone, without the run, the people and the decisions that a page shows."""
    approvals = ApprovalRequest.objects.filter(**lookups)
    if related:
        approvals = approvals.select_related("run", "run__submitted_by", "handed_over_by").prefetch_related(
            "decisions__reviewer"
        )
    if is_admin(user):
        return approvals
    if not is_reviewer(user, group_names=group_names):
        return approvals.none()
    mine = targets_of(user, group_names=group_names)
    return approvals.filter(Q(assignees=[]) | NamesAny("assignees", mine))


def approval_visible_to(user: Any, approval: ApprovalRequest, *, group_names: set[str] | None = None) -> bool:
    """`approvals_visible_to`'s rule on one row already read: admins see every approval, a
    reviewer those open to any reviewer or naming them or a group of theirs (a decision checks
    it on the row it has locked, instead of reading it once more; issue 11)."""
    if is_admin(user):
        return True
    if not is_reviewer(user, group_names=group_names):
        return False
    return not approval.assignees or bool(set(approval.assignees) & targets_of(user, group_names=group_names))


def approvals_pending_for(user: Any) -> QuerySet[ApprovalRequest]:
    """Pending and waiting for this user: not those whose quorum already has their vote. The
    rows alone: the queue reads a page's relations for its window (events.builders.approval_rows)."""
    pending = approvals_visible_to(user, related=False, status=ApprovalStatus.PENDING)
    return pending.exclude(decisions__reviewer=user).order_by("created_at")


def approval_get_for_reviewer(
    *, approval_id: Any, user: Any, group_names: set[str] | None = None, related: bool = True
) -> ApprovalRequest:
    """The approval, or NotFound whether it is missing or not the user's to see.
    `group_names` and `related` as for `approvals_visible_to`."""
    try:
        approval = approvals_visible_to(
            user, group_names=group_names, related=related, pk=approval_id
        ).first()
    except (ValueError, TypeError, ValidationError):
        approval = None
    if approval is None:
        raise NotFound("no such approval")
    return approval


def user_may_decide(user: Any, run: Run) -> bool:
    """A reviewer may act on a run (cancel it, see it as theirs) unless they submitted it or it
    is assigned elsewhere. Deciding one request asks `user_qualifies` (approvals.routing)."""
    if not is_reviewer(user) or user.pk == run.submitted_by_id:
        return False
    return not run.reviewers or user.get_username() in run.reviewers


def user_may_decide_approval(user: Any, approval: ApprovalRequest) -> bool:
    """May `user` decide this request now: the one rule (approvals/routing.py), which also
    admits the reviewers an escalation added to its targets (approvals/clock.py)."""
    return user_qualifies(user, approval, approval.run)


def reviewer_may_decide_run(username: str, run_id: str, request_id: str) -> bool:
    """The gate's check that the signing reviewer still qualifies for the request, at execution
    time: a reviewer, not the submitter, named by the request's current targets. (The worker
    answers it first from the rows it read with the call's decisions: `RequestDeciders`.)"""
    user = get_user_model().objects.filter(username=username).first()
    try:
        approval = ApprovalRequest.objects.select_related("run").filter(pk=request_id, run_id=run_id).first()
    except (ValueError, ValidationError):
        approval = None
    return user is not None and approval is not None and user_qualifies(user, approval, approval.run)


# --- what the worker reads at execution time -------------------------------------------


# --- what a reviewer reads before deciding (the desk's pages) ---------------------------
