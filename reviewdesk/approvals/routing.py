"""Who may decide a request: its targets (usernames and "group:NAME"), resolved to people.

The runtime names targets (`agents.routing`: a tool's or agent's routes over the arguments);
the run may name reviewers when submitted. This module turns names into people, and holds
the one rule for who qualifies to decide a request, which the decision, the hand-over, the
desk's pages and the gate all ask:

- a reviewer, active;
- never the run's submitter, even when named (four eyes);
- named by the request's targets, directly or through a group (no targets: any reviewer);
- under a quorum with groups, a member of one of them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import QuerySet

from agents.registry import UnknownAgent, get_agent
from agents.routing import GROUP_PREFIX
from reviewdesk.accounts.roles import REVIEWERS, group_names_of, is_reviewer
from reviewdesk.accounts.targets import naming, targets_of, users_named
from reviewdesk.approvals.models import ApprovalRequest
from reviewdesk.lib.db import NamesAny
from reviewdesk.runs.models import Run


@dataclass(frozen=True)
class QueueTiers:
    """The desk's "mine, then my groups'": conditions on each row, not lists of row ids, so a
    queue with any number of assigned rows is the same SQL (a list of ids became one bound
    variable each, and SQLite allows 32,766)."""

    targets: frozenset[str]  # the user's name and "group:NAME" for each of their groups
    username: str
    any_assigned: bool  # some of the rows name the user or a group of theirs

    def naming_me(self) -> NamesAny:
        """Rows whose targets name the user, by name or through a group."""
        return NamesAny("assignees", self.targets)


def queue_tiers(rows: QuerySet, user: Any) -> QueueTiers:
    """The tiers of `rows` for `user`, and whether any row falls in one: one query for the
    user's groups, one through the partial index over the few assigned rows."""
    targets = frozenset(targets_of(user))
    any_assigned = rows.exclude(assignees=[]).filter(NamesAny("assignees", targets)).exists()
    return QueueTiers(targets=targets, username=user.get_username(), any_assigned=any_assigned)


QUEUE_ORDER = ("expires_at", "created_at", "id")


def in_queue_order(rows: QuerySet, tiers: QueueTiers) -> list[QuerySet]:
    """`rows` in the queue's order, as parts to read one after the other: the rows naming me
    (by name, then through a group of mine, each by expiry), then the rest by expiry.

    With no call named me or my groups (the common queue) that is one part, which the
    approval_queue_order index (status, expires_at, created_at, id) gives in order. Else each
    tier is a part of its own, read in order through an index (approval_targeted for mine):
    sorted by the tier as one list, every pending row was sorted to draw one page (the socket's
    snapshot, in-process on SQLite with 10,000 pending and a quarter of them for a group of the
    reviewer's: 30 ms, against 14 ms in parts)."""
    if not tiers.any_assigned:
        return [rows.order_by(*QUEUE_ORDER)]
    assigned = rows.exclude(assignees=[])  # the partial index's condition, as it words it
    by_name = NamesAny("assignees", [tiers.username])
    by_group = NamesAny("assignees", tiers.targets - {tiers.username})
    return [
        assigned.filter(by_name).order_by(*QUEUE_ORDER),
        assigned.filter(by_group).exclude(by_name).order_by(*QUEUE_ORDER),
        rows.exclude(tiers.naming_me()).order_by(*QUEUE_ORDER),
    ]


def named_by(
    user: Any, targets: Iterable[str], groups: Iterable[str] = (), *, group_names: Iterable[str] | None = None
) -> bool:
    """Whether `targets` (empty: everyone) name `user`, and `groups` (empty: no condition) hold them.
    `group_names`: the user's own groups, when the caller has read them already."""
    mine = targets_of(user, group_names=group_names)
    targets, groups = list(targets), list(groups)
    if targets and not mine & set(targets):
        return False
    return not groups or bool(mine & {GROUP_PREFIX + g for g in groups})


def user_qualifies(
    user: Any, approval: ApprovalRequest, run: Run, *, group_names: Iterable[str] | None = None
) -> bool:
    """May `user` decide `approval` of `run`: the one rule (see the module docstring).

    `group_names`: the user's groups, when the caller read them with the user (the gate's
    check reads them with the request's decisions); otherwise read here, once for both tests."""
    if group_names is None:
        group_names = group_names_of(user)
    if not is_reviewer(user, group_names=group_names) or user.pk == run.submitted_by_id:
        return False
    return named_by(user, approval.assignees, approval.quorum_groups, group_names=group_names)


def qualified_users(approval: ApprovalRequest, run: Run) -> QuerySet:
    """Every user who qualifies to decide `approval` (the same rule as `user_qualifies`)."""
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


def named_for_call(user: Any, run: Run, tool_name: str, arguments: dict[str, Any]) -> bool:
    """Whether this call of `run`, were its request raised now, would be routed to `user`: named
    by the targets it would get (`targets_for_call`) and in its tool's quorum groups. A standing
    grant stands in for that decision, so its maker must pass this (and four eyes) at every use."""
    try:
        tool = get_agent(run.agent).tool(tool_name)
    except UnknownAgent:
        tool = None
    groups = tool.quorum.groups if tool is not None else ()
    return named_by(user, targets_for_call(run=run, tool_name=tool_name, arguments=arguments), groups)


def targets_for_call(*, run: Run, tool_name: str, arguments: dict[str, Any]) -> list[str]:
    """Who must decide a call, when its request is raised: the tool's routes, then the
    agent's, then the reviewers the run named (none: any reviewer)."""
    try:
        agent = get_agent(run.agent)
    except UnknownAgent:
        return list(run.reviewers)
    tool = agent.tool(tool_name)
    named = agent.deciders(tool, arguments) if tool is not None else None
    return list(named) if named is not None else list(run.reviewers)
