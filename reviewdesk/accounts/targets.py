"""Names that point at people: a username, or "group:NAME" for every member of a group.

Routing (agents.routing) and hand-overs name deciders this way; this module resolves the
names, so that the approvals app and the desk events resolve them alike.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Q, QuerySet

from agents.routing import GROUP_PREFIX, group_of


def targets_of(user: Any, *, group_names: Iterable[str] | None = None) -> set[str]:
    """The targets that name `user`: their username and each of their groups (`group_names`,
    when the caller has read them already)."""
    names = set(user.groups.values_list("name", flat=True) if group_names is None else group_names)
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
