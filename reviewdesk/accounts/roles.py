"""Who may do what. Groups carry roles; staff are admins."""

from __future__ import annotations

from collections.abc import Iterable

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

REVIEWERS = "reviewers"
SUBMITTERS = "submitters"


# Where `remember_group_names` leaves the names of a user's groups on the user object.
GROUP_NAMES_READ = "desk_group_names"


def remember_group_names(user: AbstractBaseUser, names: Iterable[str]) -> None:
    """Keep the names of `user`'s groups, read with the user (the API's token lookup), on this
    user object: the checks of the request it serves read them from there, not again. Only the
    object of one request carries them, so a change of groups counts from the next request."""
    setattr(user, GROUP_NAMES_READ, frozenset(names))


def forget_group_names(user: AbstractBaseUser | AnonymousUser | None) -> None:
    """Drop what `remember_group_names` kept: for a user object that outlives its request (an
    SSE stream's), whose checks must read the groups as they are at each scan."""
    if user is not None and GROUP_NAMES_READ in getattr(user, "__dict__", {}):
        delattr(user, GROUP_NAMES_READ)


def group_names_of(user: AbstractBaseUser | AnonymousUser | None) -> set[str]:
    """The names of the user's groups, in one read, for checks that would each read them (none
    when they were read with the user: `remember_group_names`)."""
    if user is None or not user.is_authenticated:
        return set()
    known = getattr(user, GROUP_NAMES_READ, None)
    if known is not None:
        return set(known)
    return set(user.groups.values_list("name", flat=True))


def is_reviewer(
    user: AbstractBaseUser | AnonymousUser | None, *, group_names: Iterable[str] | None = None
) -> bool:
    """`group_names`: the user's groups, when the caller has read them already."""
    if user is None or not user.is_authenticated or not user.is_active:
        return False
    if group_names is None:
        group_names = getattr(user, GROUP_NAMES_READ, None)
    if group_names is not None:
        return REVIEWERS in group_names
    return user.groups.filter(name=REVIEWERS).exists()


def is_submitter(user: AbstractBaseUser | AnonymousUser | None) -> bool:
    if user is None or not user.is_authenticated or not user.is_active:
        return False
    known = getattr(user, GROUP_NAMES_READ, None)
    if known is not None:
        return user.is_staff or SUBMITTERS in known
    return user.is_staff or user.groups.filter(name=SUBMITTERS).exists()


def is_admin(user: AbstractBaseUser | AnonymousUser | None) -> bool:
    return bool(user and user.is_authenticated and user.is_active and user.is_staff)
