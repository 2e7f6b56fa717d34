"""RFC 8785 canonical JSON: the bytes that are hashed and signed."""

from __future__ import annotations

import hashlib
from decimal import Decimal
from typing import Any

import rfc8785


def canonical_json(value: Any) -> bytes:
    try:
        return rfc8785.dumps(value)
    except rfc8785.IntegerDomainError:
        # Beyond 2**53 an integer is refused, but PostgreSQL's jsonb hands a large double back
        # as one (1e16 as 10000000000000000): hashing what was stored must still give the hash
        # of what was signed. Values without such integers never come here (no walk).
        return rfc8785.dumps(_large_integers_as_doubles(value))


def _large_integers_as_doubles(value: Any) -> Any:
    """`value` with each integer that is the shortest decimal of a double made that double (a
    JSON number is a double, RFC 8785 3.2.2.3); any other integer is left to be refused."""
    if isinstance(value, dict):
        return {key: _large_integers_as_doubles(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_large_integers_as_doubles(item) for item in value]
    if type(value) is int and _writes_a_double(value):
        return float(value)
    return value


def _writes_a_double(number: int) -> bool:
    """Whether `number` is the value of the shortest decimal of the double nearest it (10**21 is
    1e+21; 2**53 + 1 is no double's)."""
    try:
        return Decimal(repr(float(number))) == number
    except OverflowError:  # past the largest double
        return False


def sha256_hex(value: Any) -> str:
    """SHA-256 over the canonical JSON of `value`, hex encoded."""
    return hashlib.sha256(canonical_json(value)).hexdigest()
