"""`make run`'s launcher on real processes: it prints the URL and the logins, and where the
demo password is kept, never the password (issue 34, attack 6: a command read it from a
world-readable log of the launcher's output)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_the_launcher_says_where_the_password_is_and_never_prints_it():
    var_dir = Path(tempfile.mkdtemp(prefix="rd-launcher-"))
    env = {
        k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "DESK_DEMO_PASSWORD")
    }
    env.update(DESK_VAR_DIR=str(var_dir), PORT=str(free_port()), PYTHONUNBUFFERED="1")
    launcher = subprocess.Popen(
        [sys.executable, "-m", "reviewdesk.serve.launcher"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 120
        assert launcher.stdout is not None
        while time.monotonic() < deadline:
            line = launcher.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "Ctrl+C stops everything" in line:
                break
        launcher.send_signal(signal.SIGINT)
        rest, _ = launcher.communicate(timeout=60)
        password_file = var_dir / "demo_password"
        password = password_file.read_text().strip()
        mode = password_file.stat().st_mode & 0o777
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(launcher.pid, signal.SIGKILL)
        shutil.rmtree(var_dir, ignore_errors=True)
    output = "".join(lines) + rest

    assert "Review Desk is running at http://" in output, output
    assert "reviewers: alice, bob, dave (finance)   submitter: carol   admin: admin" in output
    assert f"password: in {password_file} (mode 0600)" in output
    assert password not in output
    assert mode == 0o600
    assert "shell commands: bubblewrap" in output or "shell commands: REFUSED" in output
    assert "agents: demo (agents.demo)" in output  # DESK_AGENTS's default
