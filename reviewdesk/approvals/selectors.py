from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db.models import Q, QuerySet

from reviewdesk.accounts.roles import is_admin, is_reviewer
from reviewdesk.approvals.models import ApprovalRequest, ApprovalStatus
from reviewdesk.db import ids_naming
from reviewdesk.errors import NotFound
from reviewdesk.runs.models import Run


def approvals_visible_to(user) -> QuerySet[ApprovalRequest]:
    """Admins see every approval; a reviewer those open to any reviewer or assigned to them."""
    approvals = ApprovalRequest.objects.select_related("run", "decision", "decision__reviewer")
    if is_admin(user):
        return approvals
    if not is_reviewer(user):
        return approvals.none()
    assigned_to_user = ids_naming(approvals, "assignees", user.get_username())
    return approvals.filter(Q(assignees=[]) | Q(id__in=assigned_to_user))


def approvals_pending_for(user) -> QuerySet[ApprovalRequest]:
    return approvals_visible_to(user).filter(status=ApprovalStatus.PENDING).order_by("created_at")


def approval_get_for_reviewer(*, approval_id, user) -> ApprovalRequest:
    """The approval, or NotFound whether it is missing or not the user's to see."""
    try:
        approval = approvals_visible_to(user).filter(pk=approval_id).first()
    except (ValueError, TypeError, ValidationError):
        approval = None
    if approval is None:
        raise NotFound("no such approval")
    return approval


def user_may_decide(user, run: Run) -> bool:
    """A reviewer may decide a run's approvals unless they submitted it or it is assigned elsewhere."""
    if not is_reviewer(user) or user.pk == run.submitted_by_id:
        return False
    return not run.reviewers or user.get_username() in run.reviewers


def reviewer_may_decide_run(username: str, run_id: str) -> bool:
    """The gate's check that the signing reviewer is still allowed, at execution time."""
    user = get_user_model().objects.filter(username=username).first()
    run = Run.objects.filter(pk=run_id).first()
    return user is not None and run is not None and user_may_decide(user, run)
