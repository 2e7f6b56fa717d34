"""Real processes for end-to-end tests: daphne serving the ASGI app and a Celery
worker consuming from Redis, both on the test database. Nothing is faked but
the model's judgement (the scripted provider)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import pytest
from django.conf import settings
from django.db import connection
from django.test import Client

from reviewdesk.approvals.signing import ensure_keys


def _flush_retrying_a_deadlock(original):
    """The live stack (daphne, Celery, beat) keeps reading while pytest-django empties the
    tables between tests. On PostgreSQL, TRUNCATE's exclusive locks can then deadlock with
    a reader's join, and the deadlock detector may pick the flush. Only the test harness's
    flush is retried; the desk's own code is untouched.

    The flush also holds the audit chain's writer lock: a late task of the previous test (a
    resume, beat's tick) that read the chain's last hash before TRUNCATE and inserted after it
    would otherwise start the next test's chain from a row that no longer exists."""

    def teardown(self):
        result = flush(self)
        # The anchor file vouches for rows of the database just emptied: it goes with them, or
        # the next test's chain would be reported as rows "anchored, then deleted". So does the
        # last full check's record, which speaks of those rows, and the last sweep's.
        Path(settings.DESK_AUDIT_ANCHOR_FILE).unlink(missing_ok=True)
        Path(settings.DESK_AUDIT_CHECK_FILE).unlink(missing_ok=True)
        Path(settings.DESK_AUDIT_SWEEP_FILE).unlink(missing_ok=True)
        return result

    def flush(self):
        from django.core.management.base import CommandError
        from django.db import DatabaseError, connection, transaction

        from reviewdesk.lib.db import serialize_writers

        for attempt in range(4):
            try:
                if connection.vendor != "postgresql":  # SQLite serialises every writer already
                    return original(self)
                with transaction.atomic():
                    serialize_writers()
                    return original(self)
            except (CommandError, DatabaseError):
                if attempt == 3:
                    raise
                time.sleep(0.5 * (attempt + 1))

    return teardown


def _install_flush_retry() -> None:
    from django.test.testcases import TransactionTestCase

    if not getattr(TransactionTestCase._fixture_teardown, "retries_deadlock", False):
        TransactionTestCase._fixture_teardown = _flush_retrying_a_deadlock(
            TransactionTestCase._fixture_teardown
        )
        TransactionTestCase._fixture_teardown.retries_deadlock = True


_install_flush_retry()

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_database_url() -> str:
    """The URL of the database pytest-django created, for the child processes."""
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{db['NAME']}"
    auth = quote(db["USER"] or "")
    if db.get("PASSWORD"):
        auth += ":" + quote(db["PASSWORD"])
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def wait_until(predicate, *, timeout: float, what: str, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@dataclass
class Process:
    name: str
    command: list[str]
    log: Path
    env: dict[str, str]
    popen: subprocess.Popen | None = None

    def start(self) -> Process:
        handle = self.log.open("ab")
        self.popen = subprocess.Popen(
            self.command,
            cwd=REPO,
            env=self.env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        return self

    def stop(self) -> None:
        if self.popen and self.popen.poll() is None:
            os.killpg(self.popen.pid, 15)
            try:
                self.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, 9)
                self.popen.wait()

    def kill(self) -> None:
        if self.popen and self.popen.poll() is None:
            os.killpg(self.popen.pid, 9)
            self.popen.wait()

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@dataclass
class Stack:
    url: str
    processes: dict[str, Process] = field(default_factory=dict)

    @property
    def ws_url(self) -> str:
        return self.url.replace("http://", "ws://") + "/ws/desk/"

    def logs(self) -> str:
        return "\n".join(f"--- {p.name} ---\n{p.log_text()[-4000:]}" for p in self.processes.values())

    def stop(self) -> None:
        for process in self.processes.values():
            process.stop()

    def kill(self) -> None:
        """kill -9 every process of the stack, children included: no goodbye, no cleanup."""
        for process in self.processes.values():
            process.kill()


def start_stack(logs: Path, *, env_extra: dict[str, str] | None = None, beat: bool = False) -> Stack:
    """Start daphne and a Celery worker (and beat) on the test database; wait until they serve."""
    ensure_keys()  # web and worker share DESK_VAR_DIR: the worker reads only the public keyring
    port = free_port()
    env = {**os.environ, "DATABASE_URL": test_database_url(), "PYTHONUNBUFFERED": "1", "PORT": str(port)}
    env.update(env_extra or {})  # PORT: the served port, which the socket's Origin allow-list derives from
    python = sys.executable
    stack = Stack(url=f"http://127.0.0.1:{port}")
    web = Process(
        "web",
        [python, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "reviewdesk.asgi:application"],
        logs / f"web-{port}.log",
        env,
    )
    worker = Process(
        "worker",
        [
            python,
            "-m",
            "celery",
            "-A",
            "reviewdesk",
            "worker",
            "-l",
            "INFO",
            "-c",
            "2",
            "--without-gossip",
            "--without-mingle",
            "-n",
            f"e2e-{port}@%h",
        ],
        logs / f"worker-{port}.log",
        env,
    )
    stack.processes = {"web": web.start(), "worker": worker.start()}
    if beat:
        schedule = logs / f"beat-{port}.schedule"
        stack.processes["beat"] = Process(
            "beat",
            [python, "-m", "celery", "-A", "reviewdesk", "beat", "-l", "INFO", "-s", str(schedule)],
            logs / f"beat-{port}.log",
            env,
        ).start()
    try:
        wait_until(lambda: _http_ok(stack.url + "/accounts/login/"), timeout=90, what="daphne")
        wait_until(lambda: " ready." in worker.log_text(), timeout=90, what="the celery worker")
    except AssertionError:
        stack.stop()
        raise AssertionError("the stack did not start:\n" + stack.logs()) from None
    return stack


@pytest.fixture(scope="session")
def live_stack(django_db_setup, django_db_blocker, redis_server, llm_server_session, tmp_path_factory):
    stack = start_stack(
        tmp_path_factory.mktemp("logs"),
        env_extra={
            "OPENAI_BASE_URL": llm_server_session.url,
            "OPENAI_MAX_RETRIES": "0",
            # Its own queue: this worker lives for the whole session, and must never
            # pick up runs that in-process tests enqueue and advance themselves.
            "DESK_CELERY_QUEUE": f"{settings.CELERY_TASK_DEFAULT_QUEUE}-live",
        },
    )
    yield stack
    stack.stop()


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def http(method: str, url: str, *, token: str | None = None, body=None, headers=None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    for name, value in (headers or {}).items():
        request.add_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


FINISHED = ("succeeded", "failed")


def get_run(stack: Stack, token: str, run_id: str) -> dict:
    status, run = http("GET", f"{stack.url}/api/v1/runs/{run_id}", token=token)
    assert status == 200, run
    return run


def wait_for_run(stack: Stack, token: str, run_id: str, *statuses: str, timeout: float = 30) -> dict:
    """Poll the run over the API until its status is one of `statuses` (default: finished)."""
    wanted = statuses or FINISHED

    def reached():
        run = get_run(stack, token, run_id)
        return run if run["status"] in wanted else None

    return wait_until(reached, timeout=timeout, what=f"run {run_id} to reach {wanted}", interval=0.1)


def session_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}"


def outbox_for(run_id: str) -> list[str]:
    """The emails sent for this run, one per message in the file outbox (whose Message-ID
    carries the run id), however the backend grouped them into files: see counting.py."""
    from tests.e2e.counting import names_run, outbox_messages

    return [m.as_string() for m in outbox_messages(Path(settings.EMAIL_FILE_PATH)) if names_run(m, run_id)]


@pytest.fixture
def own_stack(django_db_setup, django_db_blocker, redis_server, tmp_path):
    """A stack of this test's own (daphne and a worker on their own queue), stopped after it.

    For the run page's live timeline and the terminal's Ctrl-C: after some forty tests on the
    session's `live_stack`, a freshly opened run page stopped receiving its run's events (the
    run succeeded; neither push nor heartbeat replay reached the page), and a SIGINT to the
    terminal went unanswered. Both pass on a fresh stack and alone; the cause is not found yet
    (see the closing note of this session)."""
    stack = start_stack(tmp_path, env_extra={"DESK_CELERY_QUEUE": f"own-{tmp_path.name}-{os.getpid()}"})
    yield stack
    stack.stop()
