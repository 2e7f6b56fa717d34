"""Whole numbers as clients send them (query strings, headers, a terminal's input).

`str.isdigit()` says yes to digits `int()` refuses ("²", "①"), and `int()` refuses a string of
more than 4,300 digits: either is a 500 where a client made a typo. Only ASCII digits, and only
as many as the value may have, are a number here.
"""

from __future__ import annotations

# A Content-Length of any size a header carries is still a number (int() takes 4,300 digits).
HEADER_DIGITS = 4000


def whole_number(text: str, *, digits: int = 18) -> int | None:
    """`text` as a non-negative integer of at most `digits` ASCII digits, else None (18: any
    such number fits a 64-bit column)."""
    if 0 < len(text) <= digits and text.isascii() and text.isdigit():
        return int(text)
    return None
