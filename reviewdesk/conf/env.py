"""Reading settings from the environment: tiny helpers that fail loudly on bad values."""

from __future__ import annotations

import json
import os


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    if raw.lower() in {"1", "true", "yes", "on"}:
        return True
    if raw.lower() in {"0", "false", "no", "off"}:
        return False
    raise ValueError(f"{name}={raw!r} is not a boolean (use 1/0, true/false)")


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not an integer") from None


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in env_str(name, default).split(",") if item.strip()]


def env_json(name: str, default: dict) -> dict:
    """A JSON object, e.g. DESK_RESPONSE_TARGETS='{"demo.execute": 600}'."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = json.loads(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not JSON") from None
    if not isinstance(value, dict):
        raise ValueError(f"{name} must be a JSON object")
    return value
