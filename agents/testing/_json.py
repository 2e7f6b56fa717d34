"""A copy through strict JSON: what a database JSON column would give back."""

from __future__ import annotations

import json
from typing import Any


def json_copy(value: Any) -> Any:
    """A deep copy through strict JSON: NaN, infinities and non-JSON types fail here as in the database."""
    return json.loads(json.dumps(value, allow_nan=False))
