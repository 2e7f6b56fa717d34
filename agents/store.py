"""The checkpoint store interface and its in-memory implementation.

`reviewdesk.runs.stores.DatabaseCheckpointStore` is the default implementation.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol


@dataclass(frozen=True)
class Checkpoint:
    id: str
    run_id: str
    snapshot: dict[str, Any]
    message_count: int
    created_at: datetime


class CheckpointStore(Protocol):
    def put(
        self, run_id: str, snapshot: dict[str, Any], *, checkpoint_id: str | None = None
    ) -> Checkpoint: ...

    def latest(self, run_id: str) -> Checkpoint | None: ...

    def get(self, checkpoint_id: str) -> Checkpoint | None: ...

    def list(self, run_id: str) -> list[Checkpoint]: ...


class InMemoryCheckpointStore:
    def __init__(self) -> None:
        self._by_run: dict[str, list[Checkpoint]] = {}

    def put(self, run_id: str, snapshot: dict[str, Any], *, checkpoint_id: str | None = None) -> Checkpoint:
        checkpoint = Checkpoint(
            id=checkpoint_id or str(uuid.uuid4()),
            run_id=run_id,
            snapshot=snapshot,
            message_count=snapshot["message_count"],
            created_at=datetime.now(UTC),
        )
        self._by_run.setdefault(run_id, []).append(checkpoint)
        return checkpoint

    def latest(self, run_id: str) -> Checkpoint | None:
        checkpoints = self._by_run.get(run_id)
        return checkpoints[-1] if checkpoints else None

    def get(self, checkpoint_id: str) -> Checkpoint | None:
        return next((c for cs in self._by_run.values() for c in cs if c.id == checkpoint_id), None)

    def list(self, run_id: str) -> list[Checkpoint]:
        return list(self._by_run.get(run_id, []))
