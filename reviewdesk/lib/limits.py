"""The documented limits on what comes in, checked the same way at every door.

JSON nesting (the API's parser, the desk's edit form, the decision validator): deep nesting is
refused with a 4xx, never left to reach a recursive encoder, validator or canonicaliser as a
RecursionError. U+0000, which PostgreSQL cannot store, refused the same way wherever JSON or
text comes in. And the length of a reviewer's texts (a reason, a note, an external reference).
"""

from __future__ import annotations

from typing import Any

TEXT_MAX = 10_000  # a reason or a note
EXTERNAL_REF_MAX = 200

# A text holding U+0000: PostgreSQL text cannot store it (the insert raised DataError, a 500).
# DRF's words, so the API's own fields and the desk's forms say the same.
NUL_REFUSED = "Null characters are not allowed."


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


def json_holds_nul(value: Any) -> bool:
    """Whether a string or a key anywhere in `value` holds U+0000, which PostgreSQL's text and
    jsonb cannot store: a run's metadata or model holding one was a 500 on the insert, and so
    were a desk form's edited arguments, answer or grant constraints (\\u0000 in their JSON).
    Iterative, like the depth check (the value may nest up to DESK_JSON_MAX_DEPTH)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False
