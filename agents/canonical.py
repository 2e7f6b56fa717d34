"""RFC 8785 canonical JSON: the bytes that are hashed and signed."""

from __future__ import annotations

import hashlib
from typing import Any

import rfc8785


def canonical_json(value: Any) -> bytes:
    return rfc8785.dumps(value)


def sha256_hex(value: Any) -> str:
    """SHA-256 over the canonical JSON of `value`, hex encoded."""
    return hashlib.sha256(canonical_json(value)).hexdigest()
