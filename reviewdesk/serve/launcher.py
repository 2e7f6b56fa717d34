"""`make run`: the embedded Redis (unless REDIS_URL), the ASGI server, a Celery
worker and beat as children; prints the URL and logins (the usernames, and where the
password is kept: never the password, which would sit in every log the output reaches)
and how shell commands will be sandboxed; Ctrl+C stops them all."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from types import FrameType

import django


def main() -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reviewdesk.settings")
    django.setup()
    from django.conf import settings

    from reviewdesk.agent_modules.loading import loaded_agents_line, refuse_to_start_if_broken

    # Before anything starts: a DESK_AGENTS module that failed to load stops `make run` here,
    # naming the module (the web, worker and beat it would start refuse the same way).
    refuse_to_start_if_broken("run")

    from reviewdesk.accounts.demo import demo_password_whereabouts
    from reviewdesk.approvals.signing import ensure_keys
    from reviewdesk.lib.tool_world import sandbox_status
    from reviewdesk.serve import embedded

    host = os.environ.get("HOST", "127.0.0.1")
    port = os.environ.get("PORT", "8000")
    python = sys.executable
    children: list[tuple[str, subprocess.Popen[bytes]]] = []
    if settings.EMBEDDED_REDIS_SOCKET:
        children.append(("redis", embedded.start_redis(settings.EMBEDDED_REDIS_SOCKET)))
    key_id = ensure_keys()
    commands = {
        "web": [python, "-m", "daphne", "-b", host, "-p", port, "reviewdesk.asgi:application"],
        "worker": [python, "-m", "celery", "-A", "reviewdesk", "worker", "-l", "INFO", "--concurrency", "2"],
        "beat": [python, "-m", "celery", "-A", "reviewdesk", "beat", "-l", "INFO"],
    }
    for name, command in commands.items():
        children.append((name, subprocess.Popen(command)))

    stopping = False

    def stop(signum: int | None = None, frame: FrameType | None = None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    mode = "embedded SQLite + Redis" if settings.EMBEDDED_REDIS_SOCKET else "DATABASE_URL / REDIS_URL"
    print(
        f"\nReview Desk is running at http://{host}:{port}/  ({mode}, signing key {key_id})\n"
        f"  reviewers: alice, bob, dave (finance)   submitter: carol   admin: admin\n"
        f"  password: {demo_password_whereabouts()}\n"
        f"  shell commands: {sandbox_status()}\n"
        f"  agents: {loaded_agents_line()}\n"
        "  API token: .venv/bin/python manage.py create_token carol --scope submit\n"
        "  Ctrl+C stops everything.\n",
        flush=True,
    )
    exit_code = 0
    while not stopping:
        for name, child in children:
            if child.poll() is not None:
                print(f"{name} exited with {child.returncode}; stopping the rest", file=sys.stderr)
                exit_code, stopping = 1, True
        time.sleep(0.5)
    for _, child in reversed(children):
        if child.poll() is None:
            child.terminate()
    deadline = time.monotonic() + 10
    for _, child in children:
        try:
            child.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
