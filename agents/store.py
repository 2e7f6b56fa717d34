"""The checkpoint store interface and its in-memory implementation.

`reviewdesk.runs.checkpoints.DatabaseCheckpointStore` is the default implementation.
"""

from __future__ import annotations

import copy
import json
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
            snapshot=copy.deepcopy(snapshot),  # the caller keeps mutating its state
            message_count=snapshot["message_count"],
            created_at=datetime.now(UTC),
        )
        self._by_run.setdefault(run_id, []).append(checkpoint)
        return checkpoint

    def latest(self, run_id: str) -> Checkpoint | None:
        checkpoints = self._by_run.get(run_id)
        return _copied(checkpoints[-1]) if checkpoints else None

    def get(self, checkpoint_id: str) -> Checkpoint | None:
        found = next((c for cs in self._by_run.values() for c in cs if c.id == checkpoint_id), None)
        return _copied(found) if found else None

    def list(self, run_id: str) -> list[Checkpoint]:
        return [_copied(c) for c in self._by_run.get(run_id, [])]


def _copied(checkpoint: Checkpoint) -> Checkpoint:
    return Checkpoint(
        id=checkpoint.id,
        run_id=checkpoint.run_id,
        snapshot=copy.deepcopy(checkpoint.snapshot),
        message_count=checkpoint.message_count,
        created_at=checkpoint.created_at,
    )


class RedisCheckpointStore:
    """Checkpoints in Redis: one JSON string per checkpoint, one list of ids per run.

    For embedding the runtime without a database. The desk itself keeps
    checkpoints in its database, because approvals reference the checkpoint
    they were raised at and must commit in the same transaction.
    """

    def __init__(self, client: Any, *, prefix: str = "agents:checkpoints") -> None:
        self.client = client  # a redis.Redis
        self.prefix = prefix

    def _run_key(self, run_id: str) -> str:
        return f"{self.prefix}:run:{run_id}"

    def _key(self, checkpoint_id: str) -> str:
        return f"{self.prefix}:id:{checkpoint_id}"

    def put(self, run_id: str, snapshot: dict[str, Any], *, checkpoint_id: str | None = None) -> Checkpoint:
        checkpoint = Checkpoint(
            id=checkpoint_id or str(uuid.uuid4()),
            run_id=run_id,
            snapshot=copy.deepcopy(snapshot),
            message_count=snapshot["message_count"],
            created_at=datetime.now(UTC),
        )
        record = {
            "id": checkpoint.id,
            "run_id": run_id,
            "snapshot": snapshot,
            "message_count": checkpoint.message_count,
            "created_at": checkpoint.created_at.isoformat(),
        }
        if self.client.exists(self._key(checkpoint.id)):
            raise ValueError(f"checkpoint {checkpoint.id} already exists")
        # One MULTI/EXEC: a checkpoint is either stored and listed, or neither.
        pipe = self.client.pipeline(transaction=True)
        pipe.set(self._key(checkpoint.id), json.dumps(record, allow_nan=False))
        pipe.rpush(self._run_key(run_id), checkpoint.id)
        pipe.execute()
        return checkpoint

    def latest(self, run_id: str) -> Checkpoint | None:
        last = self.client.lindex(self._run_key(run_id), -1)
        return self.get(last.decode()) if last else None

    def get(self, checkpoint_id: str) -> Checkpoint | None:
        raw = self.client.get(self._key(checkpoint_id))
        return _decode(raw) if raw else None

    def list(self, run_id: str) -> list[Checkpoint]:
        ids = self.client.lrange(self._run_key(run_id), 0, -1)
        if not ids:
            return []
        keys = [self._key(i.decode()) for i in ids]
        return [_decode(raw) for raw in self.client.mget(keys) if raw]


def _decode(raw: bytes) -> Checkpoint:
    record = json.loads(raw)
    return Checkpoint(
        id=record["id"],
        run_id=record["run_id"],
        snapshot=record["snapshot"],
        message_count=record["message_count"],
        created_at=datetime.fromisoformat(record["created_at"]),
    )
