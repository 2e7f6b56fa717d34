"""The database, read by reviewdesk/settings.py: DATABASE_URL when set, else the embedded
default's SQLite file in var/; and how connections are reused."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import dj_database_url

from reviewdesk.conf import var
from reviewdesk.conf.env import env_bool, env_int


def database_settings(database_url: str, var_dir: Path) -> dict[str, dict[str, Any]]:
    """DATABASES for Django."""
    if database_url:
        default = dict(dj_database_url.parse(database_url, conn_max_age=0))
    else:
        default = {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": var.ensure_private_file(var.ensure_var_dir(var_dir) / "db.sqlite3"),  # 0600
        }
    if default["ENGINE"] == "django.db.backends.sqlite3":
        # IMMEDIATE takes the write lock at BEGIN, so two writers queue on
        # busy_timeout instead of one failing with "database is locked" on upgrade;
        # WAL lets the web tier read while a worker writes.
        default["OPTIONS"] = {
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
        # The test database must be a file: Celery workers are separate processes.
        default["TEST"] = {"NAME": str(var_dir / "test_db.sqlite3")}
    _connection_reuse(default)
    _no_jit(default)
    return {"default": default}


def _connection_reuse(default: dict[str, Any]) -> None:
    """A PostgreSQL connect costs more than a whole cycle's queries. On PostgreSQL each process
    keeps a pool of up to DESK_DB_POOL_SIZE connections (Django's "pool" option, psycopg_pool):
    under ASGI every request runs on a thread of its own, so a connection kept per thread
    (CONN_MAX_AGE) was opened for each request and never reused (Django's docs: use a pool
    under ASGI, not persistent connections). DESK_DB_POOL_SIZE=0 turns the pool off; then, as
    on SQLite, a connection is kept per thread for DESK_DB_CONN_MAX_AGE seconds (0: one per
    request and per task). Health checks hand out no connection the server closed. Celery's
    Django fixup closes connections (and an inherited pool) in each forked child, and returns
    them after a task; the lease thread closes its own when it ends."""
    pool_size = env_int("DESK_DB_POOL_SIZE", 10)
    if default["ENGINE"] == "django.db.backends.postgresql" and pool_size > 0:
        default.setdefault("OPTIONS", {})["pool"] = {
            "min_size": 1,
            # A worker process needs two at once: its task's and its lease renewer's.
            "max_size": max(pool_size, 2),
            "timeout": env_int("DESK_DB_POOL_TIMEOUT", 30),  # seconds a thread waits for one
        }
        default["CONN_MAX_AGE"] = 0  # the pool keeps them (Django refuses both)
    else:
        default["CONN_MAX_AGE"] = env_int("DESK_DB_CONN_MAX_AGE", 60)
    default["CONN_HEALTH_CHECKS"] = True


# `-c jit=…`, `-cjit=…` or `--jit=…` in libpq's `options` (not `jit_above_cost` and the like).
_SETS_JIT = re.compile(r"(?:^|\s)(?:-c\s*|--)jit=")


def _no_jit(default: dict[str, Any]) -> None:
    """PostgreSQL compiles a query to machine code (JIT) when its estimated cost passes
    `jit_above_cost`, and at 100,000 runs the estimates of a reviewer's lists pass it: the grants
    page spent 505 ms compiling a query that then ran in 1 ms. The desk sends short
    reads of a page and short writes, never the long scans that compiling pays for, so each
    connection starts with jit off (a startup option: no round trip). `options` given in
    DATABASE_URL that set jit themselves win. DESK_DB_JIT_OFF=0 sends no option, for a pooler
    that refuses startup options (PgBouncer: "unsupported startup parameter: options", which
    the pool reports as a timeout) or drops them (`ignore_startup_parameters`): set jit on the
    database role instead (docs/running.md, "PostgreSQL connections")."""
    if default["ENGINE"] != "django.db.backends.postgresql" or not env_bool("DESK_DB_JIT_OFF", True):
        return
    options = default.setdefault("OPTIONS", {})
    given = options.get("options", "")
    if not _SETS_JIT.search(given):
        options["options"] = f"{given} -c jit=off".strip()
