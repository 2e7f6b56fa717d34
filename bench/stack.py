"""What `make bench` starts: its own database and Redis keyspace, and the processes it measures.

PostgreSQL and Redis come from DATABASE_URL / REDIS_URL when set (the harness works in a
database of its own, `<name>_bench`, created afresh), else the embedded default under
var/bench/var. Processes: the desk (daphne + a 2-process Celery worker, both with the probe)
and the floors (daphne with a bare consumer, a 2-process bare Celery worker).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "var" / "bench"
DESK_QUEUE = "bench-desk"
FLOOR_QUEUE = "bench-floor"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _bench_database(url: str) -> str:
    """Recreate `<name>_bench` next to DATABASE_URL's database and return its URL."""
    import psycopg

    parts = urlsplit(url)
    name = parts.path.lstrip("/") or "postgres"
    bench_name = f"{name}_bench"
    admin = urlunsplit(parts._replace(scheme="postgresql", path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{bench_name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{bench_name}"')
    return urlunsplit(parts._replace(path=f"/{bench_name}"))


# With DATABASE_URL or REDIS_URL set, the desk counts as a production configuration: its worker
# refuses to start when it can read the signing key, as it can here (one user, the harness's
# var/), and the scripted model the cycles are driven by is off. The harness's own stack is a
# test stack, marked as the test suite marks every process it starts (tests/pytest_env.py):
# set only here, in the environment of the processes `python -m bench.run` starts, in a database
# of its own, on the embedded default as on PostgreSQL. The production checks themselves are
# unchanged; a deployment never sets these.
TEST_STACK = {"DESK_TESTING": "1", "DESK_ALLOW_SCRIPTED_MODEL": "1"}


def configure() -> dict[str, str]:
    """Set this process's environment for the bench stack (before Django starts); return it."""
    var = OUT / "var"
    if var.exists():
        shutil.rmtree(var)
    var.mkdir(parents=True)
    env = {
        "DESK_VAR_DIR": str(var),
        # Redis pub/sub ignores the database number: a prefix of its own keeps two bench runs
        # on one Redis from receiving each other's pushes.
        "DESK_CHANNEL_PREFIX": f"bench{os.getpid()}",
        "DESK_CELERY_QUEUE": DESK_QUEUE,
        "DESK_LOG_LEVEL": "WARNING",
        # One client submits every figure's cycles: limits that still run, but never refuse
        # (a full run's figures 1-9 go past the default 120 submits a minute).
        "DESK_RATE_SUBMIT": "1000000/min",
        "DESK_RATE_DECIDE": "1000000/min",
        "DESK_TOOL_WORLD": "bench.world.BenchWorld",
        # #10's framework receives its webhooks on 127.0.0.1.
        "DESK_WEBHOOKS_ALLOW_PRIVATE": "1",
        "DJANGO_SETTINGS_MODULE": "reviewdesk.settings",
        "PYTHONUNBUFFERED": "1",
        **TEST_STACK,
    }
    if os.environ.get("DATABASE_URL"):
        env["DATABASE_URL"] = _bench_database(os.environ["DATABASE_URL"])
    os.environ.update(env)
    return env


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen
    log: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@dataclass
class Stack:
    desk_url: str = ""
    floor_url: str = ""
    procs: list[Proc] = field(default_factory=list)
    redis: subprocess.Popen | None = None
    # The environment the web processes run with: a second one (figure #8) gets the same.
    web_env: dict[str, str] = field(default_factory=dict)

    def start(self, name: str, command: list[str], env: dict[str, str]) -> Proc:
        log = OUT / f"{name}.log"
        handle = log.open("wb")
        popen = subprocess.Popen(
            command, cwd=REPO, env=env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True
        )
        proc = Proc(name, popen, log)
        self.procs.append(proc)
        return proc

    def cpu_snapshot(self) -> dict[int, tuple[str, float]]:
        """Every process on the machine, by pid: who it is and the CPU time (user + system) it
        has used so far. Who: the name of the harness's process it belongs to (a Celery
        worker's forks share its session), "bench" for this driver, "postgres" or "redis" by
        command name, else "other". Two snapshots make a breakdown (`cpu_breakdown`)."""
        tick = os.sysconf("SC_CLK_TCK")
        ours = {proc.popen.pid: proc.name for proc in self.procs}
        snapshot: dict[int, tuple[str, float]] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                head, tail = (entry / "stat").read_text().rsplit(")", 1)
            except (OSError, ValueError):  # gone meanwhile
                continue
            fields, command = tail.split(), head.split("(", 1)[1]
            # After the name: state, ppid, pgrp, session, ... utime and stime are fields 14 and 15.
            session, used = int(fields[3]), (int(fields[11]) + int(fields[12])) / tick
            if session in ours:
                who = ours[session]
            elif int(entry.name) == os.getpid():
                who = "bench"
            elif command.startswith("postgres"):
                who = "postgres"
            elif command.startswith("redis-server"):
                who = "redis"
            else:
                who = "other"
            snapshot[int(entry.name)] = (who, used)
        return snapshot

    def stop_one(self, proc: Proc) -> None:
        """Stop one process the harness started (a figure's own), before the rest."""
        if proc.popen.poll() is None:
            os.killpg(proc.popen.pid, 15)
            try:
                proc.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.popen.pid, 9)
                proc.popen.wait(timeout=15)
        if proc in self.procs:
            self.procs.remove(proc)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.popen.poll() is None:
                os.killpg(proc.popen.pid, 15)
        for proc in self.procs:
            try:
                proc.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.popen.pid, 9)
        if self.redis and self.redis.poll() is None:
            self.redis.terminate()
            self.redis.wait(timeout=10)


def machine_cpu() -> tuple[float, float]:
    """The whole machine's CPU seconds so far, (busy, idle), from /proc/stat's `cpu` line:
    what a breakdown by process cannot see (a process that started and ended in between)
    shows as busy here and is reported as unattributed, not as idle."""
    tick = os.sysconf("SC_CLK_TCK")
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    busy = sum(fields[:8]) - idle  # user nice system (idle iowait) irq softirq steal; guests are in user
    return busy / tick, idle / tick


def cpu_breakdown(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]) -> dict:
    """CPU seconds used between two snapshots, by who (a process that ended in between is
    not counted; one that started is, whole)."""
    used: dict[str, float] = {}
    for pid, (who, total) in after.items():
        earlier = before.get(pid)
        spent = total - earlier[1] if earlier and earlier[0] == who else total
        used[who] = used.get(who, 0.0) + max(spent, 0.0)
    return used


def _wait(predicate, what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise RuntimeError(f"the bench stack did not start: {what}")


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status < 500
    except urllib.error.HTTPError as error:
        return error.code < 500
    except OSError:
        return False


def start_redis_if_embedded(stack: Stack, env: dict[str, str]) -> None:
    """Start the embedded Redis unless REDIS_URL is set; point the floors at the desk's broker."""
    from django.conf import settings

    from reviewdesk.serve import embedded

    if settings.EMBEDDED_REDIS_SOCKET:
        stack.redis = embedded.start_redis(settings.EMBEDDED_REDIS_SOCKET)
    # Before bench.floor is imported anywhere: its app reads these at import.
    env.update(BENCH_BROKER_URL=settings.CELERY_BROKER_URL, BENCH_FLOOR_QUEUE=FLOOR_QUEUE)
    os.environ.update(env)


def start_processes(stack: Stack, env: dict[str, str]) -> None:
    python = sys.executable
    env = {**os.environ, **env}
    desk_port = free_port()
    stack.desk_url = f"http://127.0.0.1:{desk_port}"
    # The desk's sockets take only an exact Origin: the one its pages are served from.
    env["DESK_WS_ALLOWED_ORIGINS"] = stack.desk_url
    stack.web_env = env
    celery = [python, "-m", "celery", "-A"]
    worker_args = ["worker", "-l", "WARNING", "-c", "2", "--without-gossip", "--without-mingle"]
    start_daphne(stack, "desk-web", DESK_APP, port=desk_port)
    stack.start(
        "desk-worker", [*celery, "bench.desk_worker", *worker_args, "-Q", DESK_QUEUE, "-n", "desk@%h"], env
    )
    _, stack.floor_url = start_daphne(stack, "floor-web", FLOOR_APP)
    stack.start(
        "floor-worker", [*celery, "bench.floor", *worker_args, "-Q", FLOOR_QUEUE, "-n", "floor@%h"], env
    )
    wait_daphne(stack.desk_url, DESK_APP)
    wait_daphne(stack.floor_url, FLOOR_APP)
    wait_celery("desk@", "floor@")


DESK_APP = "bench.desk_asgi:application"
FLOOR_APP = "bench.floor_asgi:application"


def start_daphne(stack: Stack, name: str, app: str, *, port: int | None = None) -> tuple[Proc, str]:
    """One more daphne serving `app`, with the web processes' environment; (process, URL).

    Two desk processes share one Origin, as they would behind one load balancer: a second one
    takes the same DESK_WS_ALLOWED_ORIGINS (the first's URL), and its clients present it."""
    port = port or free_port()
    command = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), app]
    return stack.start(name, command, stack.web_env), f"http://127.0.0.1:{port}"


def wait_daphne(url: str, app: str) -> None:
    """Until the daphne at `url` serves: the desk's login page, or the floor's open port."""
    if app == DESK_APP:
        _wait(lambda: _http_ok(url + "/accounts/login/"), f"daphne {app} at {url}")
    else:
        _wait(lambda: _port_open(int(url.rsplit(":", 1)[1])), f"daphne {app} at {url}")


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def wait_celery(*prefixes: str) -> None:
    """Until a Celery worker whose name starts with each of `prefixes` answers a ping."""
    from django.conf import settings

    _wait(lambda: _workers_ready(settings.CELERY_BROKER_URL, prefixes), f"celery workers {prefixes}")


def _workers_ready(broker: str, prefixes: tuple[str, ...]) -> bool:
    from celery import Celery

    app = Celery(broker=broker)
    try:
        replies = app.control.ping(timeout=1.0) or []
    finally:
        app.close()
    names = {name for reply in replies for name in reply}
    return all(any(n.startswith(prefix) for n in names) for prefix in prefixes)


SLACK_QUEUE = "bench-slack"


def start_slack_desk(stack: Stack, slack_env: dict[str, str]) -> tuple[list[Proc], str]:
    """A desk pair of figure #12's own, with the Slack app configured (`slack_env`: the token,
    signing secret and API URL of the stand-in the figure runs): daphne and a 2-process worker
    on a queue of their own, with the probe, as the desk's pair is. Its own, so the figures that
    measure the desk's pair keep measuring a desk without Slack (with it on, every decision's
    transaction also marks the Slack messages that show its item). Stop it with `stop_one`."""
    python = sys.executable
    env = {**stack.web_env, **slack_env, "DESK_CELERY_QUEUE": SLACK_QUEUE}
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env["DESK_WS_ALLOWED_ORIGINS"] = url
    web = stack.start(
        "slack-web", [python, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), DESK_APP], env
    )
    worker_args = ["worker", "-l", "WARNING", "-c", "2", "--without-gossip", "--without-mingle"]
    worker = stack.start(
        "slack-worker",
        [
            python,
            "-m",
            "celery",
            "-A",
            "bench.desk_worker",
            *worker_args,
            "-Q",
            SLACK_QUEUE,
            "-n",
            "slack@%h",
        ],
        env,
    )
    wait_daphne(url, DESK_APP)
    wait_celery("slack@")
    return [web, worker], url
