"""Who may see an approval, and who may decide it: the one module that answers both.

Who may see (`approvals_visible_to`, `approval_visible_to`, `approval_get_visible`): admins
see every approval; a reviewer sees those open to any reviewer (no targets) and those whose
targets name them, by username or through a group of theirs ("group:NAME").

Who may decide (`may_decide`), the one rule the decision, the hand-over, the desk's pages,
the terminal and the gate all ask:

- a reviewer, active;
- never the run's submitter, even when named (four eyes);
- named by the request's targets, directly or through a group (no targets: any reviewer);
- under a quorum with groups, a member of one of them.

`deciders_of` lists the people that rule admits; `may_decide_by_name` asks it for a reviewer
named in a signed decision, at execution time. A run as a whole (cancelling it, granting ahead
for its calls) is a reviewer's to act on by the run-level rule, `may_review_run`.

Where a new request's targets come from (a tool's routes, the run's named reviewers) is the
request's life (`lifecycle.routing`); turning target names into people is `accounts.targets`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db.models import Q, QuerySet

from agents.routing import GROUP_PREFIX
from reviewdesk.accounts.roles import REVIEWERS, group_names_of, is_admin, is_reviewer, is_submitter
from reviewdesk.accounts.targets import naming, targets_of, users_named
from reviewdesk.approvals.models import ApprovalRequest
from reviewdesk.lib.db import NamesAny
from reviewdesk.lib.errors import NotFound
from reviewdesk.runs.models import Run, RunKind

if TYPE_CHECKING:
    from django.contrib.auth.models import AnonymousUser, User


# --- who may see ------------------------------------------------------------------------


def approvals_visible_to(
    user: User | AnonymousUser, *, group_names: set[str] | None = None, related: bool = True, **lookups: Any
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
    # A framework's account follows the calls of the external runs it submitted (it polls them
    # for their decisions); it never decides them (four eyes, `may_decide`).
    own_external = Q(run__submitted_by=user, run__kind=RunKind.EXTERNAL)
    if not is_reviewer(user, group_names=group_names):
        return approvals.filter(own_external) if is_submitter(user) else approvals.none()
    mine = targets_of(user, group_names=group_names)
    visible = Q(assignees=[]) | NamesAny("assignees", mine)
    # A plain reviewer's query stays as it was (its plans are measured: test_query_plans).
    return approvals.filter(visible | own_external if is_submitter(user) else visible)


def approval_visible_to(
    user: User | AnonymousUser, approval: ApprovalRequest, *, group_names: set[str] | None = None
) -> bool:
    """`approvals_visible_to`'s rule on one row already read (a decision checks it on the row
    it has locked, instead of reading it once more)."""
    if is_admin(user):
        return True
    if approval.run.is_external and approval.run.submitted_by_id == user.pk:
        return True  # its submitter follows it (`approvals_visible_to`); deciding is refused
    if not is_reviewer(user, group_names=group_names):
        return False
    return not approval.assignees or bool(set(approval.assignees) & targets_of(user, group_names=group_names))


def approval_get_visible(
    *,
    approval_id: Any,
    user: User | AnonymousUser,
    group_names: set[str] | None = None,
    related: bool = True,
) -> ApprovalRequest:
    """The approval, or NotFound whether it is missing or not the user's to see: the two
    answer alike. `group_names` and `related` as for `approvals_visible_to`."""
    try:
        approval = approvals_visible_to(
            user, group_names=group_names, related=related, pk=approval_id
        ).first()
    except (ValueError, TypeError, ValidationError):
        approval = None
    if approval is None:
        raise NotFound("no such approval")
    return approval


# --- who may decide -----------------------------------------------------------------------


def named_by(
    user: User,
    targets: Iterable[str],
    groups: Iterable[str] = (),
    *,
    group_names: Iterable[str] | None = None,
) -> bool:
    """Whether `targets` (empty: everyone) name `user`, and `groups` (empty: no condition) hold them.
    `group_names`: the user's own groups, when the caller has read them already."""
    mine = targets_of(user, group_names=group_names)
    targets, groups = list(targets), list(groups)
    if targets and not mine & set(targets):
        return False
    return not groups or bool(mine & {GROUP_PREFIX + g for g in groups})


def may_decide(
    user: User,
    approval: ApprovalRequest,
    run: Run | None = None,
    *,
    group_names: Iterable[str] | None = None,
) -> bool:
    """May `user` decide `approval` (of `run`, by default the approval's own) now: the one rule
    (see the module docstring). An escalation adds its reviewers to the targets, so they pass.

    `group_names`: the user's groups, when the caller read them with the user (the gate's
    check reads them with the request's decisions); otherwise read here, once for both tests."""
    run = approval.run if run is None else run
    if group_names is None:
        group_names = group_names_of(user)
    if not is_reviewer(user, group_names=group_names) or user.pk == run.submitted_by_id:
        return False
    return named_by(user, approval.assignees, approval.quorum_groups, group_names=group_names)


def may_decide_by_name(username: str, run_id: str, request_id: str) -> bool:
    """`may_decide` for the reviewer a signed decision names, asked by the gate at execution
    time: the request's current targets, not those it was decided under. (The worker answers
    it first from the rows it read with the call's decisions: `reads.decisions.RequestDeciders`.)"""
    user = get_user_model().objects.filter(username=username).first()
    try:
        approval = ApprovalRequest.objects.select_related("run").filter(pk=request_id, run_id=run_id).first()
    except (ValueError, ValidationError):
        approval = None
    return user is not None and approval is not None and may_decide(user, approval)


def deciders_of(approval: ApprovalRequest, run: Run) -> QuerySet:
    """Every user `may_decide` admits for `approval` of `run`, as one query."""
    users = (
        get_user_model()
        .objects.filter(is_active=True, groups__name=REVIEWERS)
        .exclude(pk=run.submitted_by_id)
    )
    if approval.assignees:
        users = users.filter(naming(approval.assignees))
    if approval.quorum_groups:
        users = users.filter(groups__name__in=approval.quorum_groups)
    return users.distinct()


def may_review_run(user: User | AnonymousUser, run: Run) -> bool:
    """The run-level rule: a reviewer may act on a run as a whole (cancel it; grant ahead for
    its calls) unless they submitted it or the run named other reviewers. Deciding one of its
    requests asks `may_decide`."""
    if not is_reviewer(user) or user.pk == run.submitted_by_id:
        return False
    # An external run may name groups too ("group:finance"): their members review it.
    return not run.reviewers or bool(targets_of(user) & set(run.reviewers))


def approval_audience(approval: ApprovalRequest) -> list[int]:
    """User ids that desk events about this request go to; empty means every reviewer.

    Named targets reach the users they name; when those are nobody (an empty group), only
    admins are told: an empty list would tell everyone."""
    if not approval.assignees:
        return []
    named = set(users_named(approval.assignees).values_list("id", flat=True))
    if not named:
        named = set(get_user_model().objects.filter(is_staff=True).values_list("id", flat=True))
    return sorted(named)
