"""Who may do what. Groups carry roles; staff are admins."""

from __future__ import annotations

from collections.abc import Iterable

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

REVIEWERS = "reviewers"
SUBMITTERS = "submitters"


def group_names_of(user: AbstractBaseUser | AnonymousUser | None) -> set[str]:
    """The names of the user's groups, in one read, for checks that would each read them."""
    if user is None or not user.is_authenticated:
        return set()
    return set(user.groups.values_list("name", flat=True))


def is_reviewer(
    user: AbstractBaseUser | AnonymousUser | None, *, group_names: Iterable[str] | None = None
) -> bool:
    """`group_names`: the user's groups, when the caller has read them already."""
    if user is None or not user.is_authenticated or not user.is_active:
        return False
    if group_names is not None:
        return REVIEWERS in group_names
    return user.groups.filter(name=REVIEWERS).exists()


def is_submitter(user: AbstractBaseUser | AnonymousUser | None) -> bool:
    if user is None or not user.is_authenticated or not user.is_active:
        return False
    return user.is_staff or user.groups.filter(name=SUBMITTERS).exists()


def is_admin(user: AbstractBaseUser | AnonymousUser | None) -> bool:
    return bool(user and user.is_authenticated and user.is_active and user.is_staff)
