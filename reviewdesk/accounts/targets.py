"""Names that point at people: a username, or "group:NAME" for every member of a group.

Routing (agents.routing) and hand-overs name deciders this way; this module resolves the
names, so that every part of the approvals app resolves them alike.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from django.contrib.auth import get_user_model
from django.db.models import Q, QuerySet

from agents.routing import GROUP_PREFIX, group_of
from reviewdesk.accounts.roles import group_names_of

if TYPE_CHECKING:
    from django.contrib.auth.models import AnonymousUser, User


def targets_of(user: User | AnonymousUser, *, group_names: Iterable[str] | None = None) -> set[str]:
    """The targets that name `user`: their username and each of their groups (`group_names`,
    when the caller has read them already; else as the request read them with the user, or
    now: roles.group_names_of)."""
    names = set(group_names_of(user) if group_names is None else group_names)
    return {user.get_username()} | {GROUP_PREFIX + name for name in names}


def naming(targets: Iterable[str]) -> Q:
    """A filter on users for everyone `targets` name."""
    names, groups = [], []
    for target in targets:
        group = group_of(target)
        if group is None:
            names.append(target)
        else:
            groups.append(group)
    return Q(username__in=names) | Q(groups__name__in=groups)


def users_named(targets: Iterable[str]) -> QuerySet:
    return get_user_model().objects.filter(naming(targets)).distinct()


def usernames_named(targets: Iterable[str]) -> list[str]:
    """The usernames `targets` name, groups expanded; no query when none is a group."""
    targets = list(targets)
    if all(group_of(t) is None for t in targets):
        return targets
    return sorted(users_named(targets).values_list("username", flat=True))


class UsernamesNamed:
    """`usernames_named` for a page of target lists at once: one query for every group (and
    every username beside a group) on the page, not one per list that names a group.
    Call it with one of the lists; it answers as `usernames_named` would."""

    def __init__(self, target_lists: Iterable[Iterable[str]]) -> None:
        lists = [list(targets) for targets in target_lists]
        with_groups = {t for targets in lists if _names_a_group(targets) for t in targets}
        self._members: dict[str, set[str]] = {}
        self._users: set[str] = set()
        if not with_groups:
            return
        # A (username, group) pair per membership of each user a list names, the join the
        # filter made: a user named by a group comes with that group.
        for username, group in users_named(with_groups).values_list("username", "groups__name"):
            self._users.add(username)
            if group is not None:
                self._members.setdefault(GROUP_PREFIX + group, set()).add(username)

    def __call__(self, targets: Iterable[str]) -> list[str]:
        targets = list(targets)
        if not _names_a_group(targets):
            return targets
        named = {t for t in targets if group_of(t) is None and t in self._users}
        for target in targets:
            if group_of(target) is not None:
                named |= self._members.get(target, set())
        return sorted(named)


def _names_a_group(targets: list[str]) -> bool:
    return any(group_of(t) is not None for t in targets)
