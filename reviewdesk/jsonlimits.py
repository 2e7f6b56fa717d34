"""The documented limit on JSON nesting, checked the same way wherever JSON comes in (the API's
parser, the desk's edit form, the decision validator): deep nesting is refused with a 4xx,
never left to reach a recursive encoder, validator or canonicaliser as a RecursionError."""

from __future__ import annotations

from typing import Any


def json_depth_exceeds(value: Any, limit: int) -> bool:
    """Whether `value` nests containers deeper than `limit` (a scalar is depth 0). Iterative."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth + 1 > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False
