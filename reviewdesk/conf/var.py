"""var/, the embedded default's private folder: made 0700, its secrets (the Django secret key,
the decision signing key's neighbours, the demo password) created 0600 on first use, and where
the embedded Redis's socket goes. Path arithmetic and files only: settings read it before
Django is set up, and nothing here starts a process (`serve.embedded.start_redis` does)."""

from __future__ import annotations

import os
import secrets
import tempfile
import threading
from pathlib import Path

# A unix socket path must fit in sockaddr_un.sun_path (108 bytes on Linux).
_MAX_SOCKET_PATH = 100


def ensure_var_dir(var_dir: Path) -> Path:
    """Create var/ private to this user (0700), tightening one created before with a looser mode.

    It holds the database, the secret key, the signing key and the demo password: another
    local user must not read a session key out of db.sqlite3.
    """
    var_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    if var_dir.stat().st_mode & 0o777 != 0o700:
        var_dir.chmod(0o700)
    return var_dir


def ensure_static_root(static_root: Path, var_dir: Path) -> Path:
    """Make STATIC_ROOT, which whitenoise looks for when the web process loads its middleware (it
    warns when it is missing). The web process makes it, in its own var/ (kept 0700), not settings
    at import: a worker that cannot enter the web's var/ imports the same settings."""
    if static_root.is_relative_to(var_dir):
        ensure_var_dir(var_dir)
    static_root.mkdir(parents=True, exist_ok=True)
    return static_root


def ensure_private_file(path: Path) -> Path:
    """Create `path` empty with mode 0600 unless it exists, and make an existing one 0600.

    SQLite creates its database file with the process umask (usually 0644) and its -wal and
    -shm files with the database file's mode: creating the file first makes all three private.
    An empty file is a valid empty SQLite database.
    """
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        if path.stat().st_mode & 0o777 != 0o600:
            path.chmod(0o600)
    return path


def read_or_create_secret(path: Path, *, nbytes: int = 48) -> str:
    """Return the secret stored at `path`, creating it (mode 0600) on first use.

    Two processes (or threads) may both find it missing: the first to put its file in place
    wins and the other reads the winner's (`create_private`). A plain O_EXCL create raised
    FileExistsError in the loser, or handed it a file not yet written."""
    if path.exists():
        return path.read_text().strip()
    ensure_var_dir(path.parent)
    value = secrets.token_urlsafe(nbytes)
    try:
        create_private(path, (value + "\n").encode())
    except FileExistsError:
        value = path.read_text().strip()
    return value


def create_private(path: Path, data: bytes) -> None:
    """Create `path` (0600) holding `data`, or raise FileExistsError when it exists. Written
    whole under a draft name of this process and thread, then linked into place: whoever finds
    it there reads it whole, never empty or half written, and of two creators one wins."""
    draft = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.draft")
    fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.link(draft, path)
    finally:
        draft.unlink(missing_ok=True)


def redis_socket_path(var_dir: Path) -> Path:
    """Where the embedded Redis listens; falls back to /tmp when var/ is too deep."""
    path = var_dir / "redis.sock"
    if len(str(path)) <= _MAX_SOCKET_PATH:
        return path
    digest = abs(hash(str(var_dir.resolve()))) % 10**10
    return Path(tempfile.gettempdir()) / f"reviewdesk-{digest}.sock"
