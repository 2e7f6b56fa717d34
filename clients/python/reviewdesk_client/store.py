"""Where the client keeps what must survive the agent's process: the framework's paused state,
the tickets (written before `submit` returns), verified-but-unconsumed decisions (single use),
the nonces it consumed, and which decisions the resumer has handed to a handler.

`MemoryStore` for one process's life; `SQLiteStore(path)` (stdlib sqlite3, WAL) for restarts
and for several processes on one machine: every claim is one atomic statement.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from reviewdesk_client.models import Ticket, Verified


class Store(Protocol):
    def put_state(self, key: str, value: str) -> None: ...
    def get_state(self, key: str) -> str | None: ...
    def delete_state(self, key: str) -> None: ...
    def put_tickets(self, tickets: Iterable[Ticket]) -> None: ...
    def ticket(self, external_id: str, tool_call_id: str) -> Ticket | None: ...
    def tickets(self, external_id: str) -> list[Ticket]: ...
    def ticket_by_approval(self, approval_id: str) -> Ticket | None: ...
    def put_verified(self, key: str, verified: Verified) -> None: ...
    def take_verified(self, key: str) -> Verified | None: ...
    def claim_nonce(self, nonce: str) -> bool: ...
    def release_nonce(self, nonce: str) -> None: ...
    def is_consumed(self, nonce: str) -> bool: ...
    def claim_handled(self, decision_id: str) -> bool: ...
    def release_handled(self, decision_id: str) -> None: ...


class MemoryStore:
    """A store for one process's life (the default): nothing survives a restart."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state: dict[str, str] = {}
        self._tickets: dict[str, Ticket] = {}  # by approval id
        self._verified: dict[str, Verified] = {}
        self._nonces: set[str] = set()
        self._handled: set[str] = set()

    def put_state(self, key: str, value: str) -> None:
        with self._lock:
            self._state[key] = value

    def get_state(self, key: str) -> str | None:
        return self._state.get(key)

    def delete_state(self, key: str) -> None:
        with self._lock:
            self._state.pop(key, None)

    def put_tickets(self, tickets: Iterable[Ticket]) -> None:
        with self._lock:
            for ticket in tickets:
                self._tickets[ticket.approval_id] = ticket

    def ticket(self, external_id: str, tool_call_id: str) -> Ticket | None:
        found = [
            t
            for t in self._tickets.values()
            if (t.external_id, t.tool_call_id) == (external_id, tool_call_id)
        ]
        return found[-1] if found else None

    def tickets(self, external_id: str) -> list[Ticket]:
        return [t for t in self._tickets.values() if t.external_id == external_id]

    def ticket_by_approval(self, approval_id: str) -> Ticket | None:
        return self._tickets.get(approval_id)

    def put_verified(self, key: str, verified: Verified) -> None:
        with self._lock:
            self._verified[key] = verified

    def take_verified(self, key: str) -> Verified | None:
        with self._lock:
            return self._verified.pop(key, None)

    def claim_nonce(self, nonce: str) -> bool:
        return self._claim(self._nonces, nonce)

    def release_nonce(self, nonce: str) -> None:
        with self._lock:
            self._nonces.discard(nonce)

    def is_consumed(self, nonce: str) -> bool:
        return nonce in self._nonces

    def claim_handled(self, decision_id: str) -> bool:
        return self._claim(self._handled, decision_id)

    def release_handled(self, decision_id: str) -> None:
        with self._lock:
            self._handled.discard(decision_id)

    def _claim(self, claimed: set[str], item: str) -> bool:
        with self._lock:
            if item in claimed:
                return False
            claimed.add(item)
            return True


SCHEMA = """
CREATE TABLE IF NOT EXISTS state (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tickets (
    approval_id TEXT PRIMARY KEY, external_id TEXT NOT NULL, tool_call_id TEXT NOT NULL,
    data TEXT NOT NULL, created INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS tickets_call ON tickets (external_id, tool_call_id);
CREATE TABLE IF NOT EXISTS verified (key TEXT PRIMARY KEY, data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS consumed_nonces (nonce TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS handled_decisions (decision_id TEXT PRIMARY KEY);
"""


class SQLiteStore:
    """A store in one SQLite file: survives restarts, shared by the agent's processes on a machine."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        # Autocommit: each statement is its own transaction, and each claim is one statement.
        self._db = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _run(self, sql: str, params: tuple = ()) -> sqlite3.Cursor:
        with self._lock:
            return self._db.execute(sql, params)

    def _one(self, sql: str, params: tuple = ()) -> tuple | None:
        with self._lock:
            return self._db.execute(sql, params).fetchone()

    def _all(self, sql: str, params: tuple = ()) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, params).fetchall()

    def put_state(self, key: str, value: str) -> None:
        self._run("INSERT OR REPLACE INTO state (key, value) VALUES (?, ?)", (key, value))

    def get_state(self, key: str) -> str | None:
        row = self._one("SELECT value FROM state WHERE key = ?", (key,))
        return row[0] if row else None

    def delete_state(self, key: str) -> None:
        self._run("DELETE FROM state WHERE key = ?", (key,))

    def put_tickets(self, tickets: Iterable[Ticket]) -> None:
        rows = [(t.approval_id, t.external_id, t.tool_call_id, json.dumps(t.to_dict())) for t in tickets]
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for row in rows:
                    self._db.execute(
                        "INSERT OR REPLACE INTO tickets (approval_id, external_id, tool_call_id, data, created)"
                        " VALUES (?, ?, ?, ?, (SELECT COALESCE(MAX(created), 0) + 1 FROM tickets))",
                        row,
                    )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def ticket(self, external_id: str, tool_call_id: str) -> Ticket | None:
        row = self._one(
            "SELECT data FROM tickets WHERE external_id = ? AND tool_call_id = ? ORDER BY created DESC LIMIT 1",
            (external_id, tool_call_id),
        )
        return Ticket.from_dict(json.loads(row[0])) if row else None

    def tickets(self, external_id: str) -> list[Ticket]:
        rows = self._all("SELECT data FROM tickets WHERE external_id = ? ORDER BY created", (external_id,))
        return [Ticket.from_dict(json.loads(row[0])) for row in rows]

    def ticket_by_approval(self, approval_id: str) -> Ticket | None:
        row = self._one("SELECT data FROM tickets WHERE approval_id = ?", (approval_id,))
        return Ticket.from_dict(json.loads(row[0])) if row else None

    def put_verified(self, key: str, verified: Verified) -> None:
        self._run(
            "INSERT OR REPLACE INTO verified (key, data) VALUES (?, ?)", (key, json.dumps(verified.to_dict()))
        )

    def take_verified(self, key: str) -> Verified | None:
        # DELETE ... RETURNING: whoever deletes the row has it; a second taker gets None.
        rows = self._all("DELETE FROM verified WHERE key = ? RETURNING data", (key,))
        return Verified.from_dict(json.loads(rows[0][0])) if rows else None

    def claim_nonce(self, nonce: str) -> bool:
        return self._run("INSERT OR IGNORE INTO consumed_nonces (nonce) VALUES (?)", (nonce,)).rowcount == 1

    def release_nonce(self, nonce: str) -> None:
        self._run("DELETE FROM consumed_nonces WHERE nonce = ?", (nonce,))

    def is_consumed(self, nonce: str) -> bool:
        return self._one("SELECT 1 FROM consumed_nonces WHERE nonce = ?", (nonce,)) is not None

    def claim_handled(self, decision_id: str) -> bool:
        return (
            self._run(
                "INSERT OR IGNORE INTO handled_decisions (decision_id) VALUES (?)", (decision_id,)
            ).rowcount
            == 1
        )

    def release_handled(self, decision_id: str) -> None:
        self._run("DELETE FROM handled_decisions WHERE decision_id = ?", (decision_id,))
