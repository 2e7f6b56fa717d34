"""PLACEHOLDER until h-prov merges (issue 38 contract §1): the shapes only, no finding."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

SOURCE_KINDS = ("task", "tool_output", "reviewer", "system", "none")


@dataclass(frozen=True)
class ToolTrust:
    trusted: Callable[[str], bool]
    answers_human: Callable[[str], bool] = lambda name: False


def leaves(value: Any, pointer: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from leaves(item, f"{pointer}/{str(key).replace('~', '~0').replace('/', '~1')}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from leaves(item, f"{pointer}/{index}")
    elif isinstance(value, str) or (isinstance(value, int | float) and not isinstance(value, bool)):
        yield pointer, value


def provenance_of(arguments: Any, messages: Sequence[dict], trust: ToolTrust) -> dict[str, list[dict]]:
    return {pointer: [{"kind": "none"}] for pointer, _ in leaves(arguments)}


def provenance_flags(provenance: dict, *, aimed: Collection[str] | None, external: bool) -> list[dict]:
    return []


def injection_flags(arguments: Any) -> list[dict]:
    return []


def source_label(source: dict) -> str:
    return "not seen before (model-written)"
