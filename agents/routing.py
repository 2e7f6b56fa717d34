"""Who must decide a call, and how many of them: routes over the arguments and quorums.

Declared with the tool (or the agent), read by the desk when it raises the request:

    refund_payment = Tool(
        ...,
        routing=(Route(to=("group:finance",), when=(Condition("amount", ">", 1000),)),),
    )
    execute = Tool(..., quorum=Quorum(approvals=2))

A target is a username ("alice") or a group ("group:finance"). The first route whose
conditions all hold names the deciders; when none holds, the run's own reviewers do (and
when it named none, any reviewer). Whoever is named, the run's submitter never decides it:
the desk enforces that four-eyes rule when a decision is made, and the gate again.

The runtime knows no users or groups: it only says who is named. Resolving names to
people is the desk's (`reviewdesk.approvals.lifecycle.routing`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

GROUP_PREFIX = "group:"


def _ordered(compare: Callable[[Any, Any], bool]) -> Callable[[Any, Any], bool]:
    """A comparison of numbers only: True is not 1 and "2000" is not an amount here."""

    def check(left: Any, right: Any) -> bool:
        numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (left, right))
        return numbers and compare(left, right)

    return check


OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    ">": _ordered(operator.gt),
    ">=": _ordered(operator.ge),
    "<": _ordered(operator.lt),
    "<=": _ordered(operator.le),
    "==": operator.eq,
    "!=": operator.ne,
    "in": lambda left, right: left in right,
    "endswith": lambda left, right: isinstance(left, str) and left.endswith(right),
}


def is_target(name: Any) -> bool:
    """A username, or "group:" and a group name; neither may be empty or carry spaces, nor a
    NUL (no stored name can: PostgreSQL text cannot hold one)."""
    if not isinstance(name, str) or not name or name != name.strip() or " " in name or "\x00" in name:
        return False
    return name != GROUP_PREFIX


def group_of(target: str) -> str | None:
    """The group a target names, or None for a username."""
    return target[len(GROUP_PREFIX) :] if target.startswith(GROUP_PREFIX) else None


@dataclass(frozen=True)
class Condition:
    """`arguments[field] <op> value`; a missing field or a value of another type never holds."""

    field: str
    op: str
    value: Any

    def __post_init__(self) -> None:
        if self.op not in OPERATORS:
            raise ValueError(f"unknown operator {self.op!r}; one of {', '.join(OPERATORS)}")

    def holds(self, arguments: Mapping[str, Any]) -> bool:
        if self.field not in arguments:
            return False
        try:
            return bool(OPERATORS[self.op](arguments[self.field], self.value))
        except TypeError:
            return False


@dataclass(frozen=True)
class Route:
    """Send the call to `to` when every condition holds (no condition: always)."""

    to: tuple[str, ...]
    when: tuple[Condition, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.to, str) or not self.to or not all(is_target(t) for t in self.to):
            raise ValueError(f"a route names one or more users or 'group:NAME' targets, not {self.to!r}")

    def applies(self, arguments: Mapping[str, Any]) -> bool:
        return all(condition.holds(arguments) for condition in self.when)


def routed_to(routes: Sequence[Route], arguments: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The targets of the first route that applies, or None when none does."""
    for route in routes:
        if route.applies(arguments):
            return route.to
    return None


@dataclass(frozen=True)
class Quorum:
    """How many different reviewers must approve a call, each with their own signed decision.

    `groups`: when given, a vote counts only from a member of one of them (the desk checks it
    when the vote is cast). The gate counts distinct signing reviewers against `approvals`."""

    approvals: int = 1
    groups: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if type(self.approvals) is not int or self.approvals < 1:
            raise ValueError("a quorum needs at least one approval")
        if isinstance(self.groups, str):
            raise ValueError("Quorum.groups is a tuple of group names")
