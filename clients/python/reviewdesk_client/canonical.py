"""RFC 8785 canonical JSON: the bytes the desk hashes and signs, computed here the same way.

The desk canonicalises with `rfc8785` (agents/canonical.py); so does this module, with the same
rule for integers past 2**53 that are the shortest decimal of a double (PostgreSQL's jsonb hands
1e16 back as 10000000000000000): they are hashed as that double, any other such integer is
refused. tests/test_canonical.py compares the bytes with the desk's own function.
"""

from __future__ import annotations

import hashlib
from decimal import Decimal
from typing import Any

import rfc8785


def jcs(value: Any) -> bytes:
    """The RFC 8785 canonical JSON bytes of `value`."""
    try:
        return rfc8785.dumps(value)
    except rfc8785.IntegerDomainError:
        return rfc8785.dumps(_large_integers_as_doubles(value))


def args_sha256(value: Any) -> str:
    """Hex SHA-256 of `jcs(value)`: a call's `arguments_sha256`."""
    return hashlib.sha256(jcs(value)).hexdigest()


def text_sha256(text: str) -> str:
    """Hex SHA-256 of the UTF-8 bytes of `text` (how a payload binds the reviewer's reason)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _large_integers_as_doubles(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _large_integers_as_doubles(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_large_integers_as_doubles(item) for item in value]
    if type(value) is int and _writes_a_double(value):
        return float(value)
    return value


def _writes_a_double(number: int) -> bool:
    try:
        return Decimal(repr(float(number))) == number
    except OverflowError:
        return False
