"""docs/running.md, "Web and worker as different users", followed on real processes: two system
users, the directories and modes the section lays out, the keys made with `manage.py signing_key
create`, then the Procfile's web as desk-web and its worker and beat as desk-worker, on
PostgreSQL and Redis. One decision goes through: a run submitted to the web, its email approved
on the web, the worker sends it.

The worker shares the web's settings for the key paths, so DESK_SIGNING_KEY_FILE names a key in
a directory it cannot enter: it must say the key is out of its reach and start. The web's var/
stays 0700 and the worker has a var/ of its own (DESK_VAR_DIR).
"""

from __future__ import annotations

import os
import secrets
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.conf import settings

from reviewdesk.accounts.services import token_create
from reviewdesk.approvals.models import ApprovalRequest
from reviewdesk.audit.keys import audit_key
from reviewdesk.runs.models import Attempt, Run, RunStatus
from tests import two_users
from tests.conftest import SEND_EMAIL_SCRIPT
from tests.e2e import conftest as e2e
from tests.e2e.conftest import REPO, Process, _http_ok, free_port, http, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@dataclass
class AsUser(Process):
    """A Process started in `cwd`: the checkout as the other users reach it."""

    cwd: Path = REPO

    def start(self) -> AsUser:
        handle = self.log.open("ab")
        self.popen = subprocess.Popen(
            self.command,
            cwd=self.cwd,
            env=self.env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        return self


def procfile() -> dict[str, str]:
    lines = (REPO / "Procfile").read_text().splitlines()
    return dict(line.split(": ", 1) for line in lines if line.strip() and not line.startswith("#"))


def procfile_command(name: str, python: Path, port: int) -> list[str]:
    """The Procfile's line, with the users' python for `python` and the port for $PORT."""
    argv = shlex.split(procfile()[name].replace("$PORT", str(port)))
    assert argv[0] == "python", argv
    return [str(python), *argv[1:]]


def install(path: Path, mode: int, user: two_users.User | None = None, *, directory: bool = True) -> Path:
    if directory:
        path.mkdir(parents=True, exist_ok=True)
    os.chown(path, user.uid if user else 0, user.gid if user else 0)
    path.chmod(mode)
    return path


@pytest.fixture
def layout(django_db_setup, redis_server):
    """The section's layout under a scratch root: /etc/reviewdesk and /var/lib/reviewdesk."""
    reason = two_users.why_not()
    if reason:
        pytest.skip(reason)
    if settings.DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql" or not settings.REDIS_URL:
        pytest.skip(
            "the two-user layout is a production configuration: PostgreSQL and Redis over TCP "
            "(the embedded default's SQLite file and Redis socket sit in root's var/)"
        )
    with two_users.shared_directory() as root, two_users.system_users("desk-web", "desk-worker") as users:
        web, worker = users["desk-web"], users["desk-worker"]
        python, python_env = two_users.shared_python(root)
        etc, lib = install(root / "etc", 0o755), install(root / "lib", 0o755)
        paths = {
            "web_etc": etc / "web",  # made by signing_key create (0700), then given to desk-web
            "public": install(etc / "public", 0o755),
            "worker_etc": install(etc / "worker", 0o700, worker),
            "web_var": install(lib / "web", 0o700, web),
            "worker_var": install(lib / "worker", 0o700, worker),
            "audit": install(lib / "audit", 0o755, worker),
            "grants": install(lib / "grants", 0o755, web),
        }
        yield users, (python, python_env), paths, two_users.project_tree(root)


def settings_env(paths: dict[str, Path], port: int) -> dict[str, str]:
    """What both users' services are given (an environment file in the section)."""
    keep = ("PATH", "LANG", "LC_ALL", "TZ")
    return {
        **{k: v for k, v in os.environ.items() if k in keep},
        "PYTHONUNBUFFERED": "1",
        "DATABASE_URL": e2e.test_database_url(),  # via the module: pytest would collect the name as a test
        "REDIS_URL": settings.REDIS_URL,
        "DJANGO_DEBUG": "0",
        "DJANGO_ALLOWED_HOSTS": "127.0.0.1",
        "PORT": str(port),
        "DESK_PUBLIC_URL": f"http://127.0.0.1:{port}",
        "DESK_SIGNING_KEY_FILE": str(paths["web_etc"] / "signing_key.pem"),
        "DESK_VERIFY_KEYS_FILE": str(paths["public"] / "verify_keys.json"),
        "DESK_AUDIT_ANCHOR_FILE": str(paths["audit"] / "audit_anchors.jsonl"),
        "DESK_AUDIT_ANCHOR_KEYS_FILE": str(paths["audit"] / "audit_anchor_keys.json"),
        "DESK_AUDIT_CHECK_FILE": str(paths["audit"] / "audit_check.json"),
        "DESK_AUDIT_SWEEP_FILE": str(paths["audit"] / "audit_sweep.json"),
        "DESK_GRANT_REVOCATIONS_FILE": str(paths["grants"] / "grant_revocations.jsonl"),
        # The test's own queue and channel prefix; scripted models drive the run (off by default
        # in production).
        "DESK_CELERY_QUEUE": f"{settings.CELERY_TASK_DEFAULT_QUEUE}-two-users",
        "DESK_CHANNEL_PREFIX": f"{os.environ.get('DESK_CHANNEL_PREFIX', 'rd')}2u",
        "DESK_ALLOW_SCRIPTED_MODEL": "1",
    }


def test_the_procfile_runs_as_two_users_as_the_production_section_describes(layout, personas, tmp_path):
    users, (python, python_env), paths, project = layout
    web, worker = users["desk-web"], users["desk-worker"]
    port = free_port()
    both = {**settings_env(paths, port), **python_env}
    manage = [str(python), "manage.py"]

    # Keys, as root: the signing key and the public keyring, then the key handed to desk-web.
    made = subprocess.run(
        [*manage, "signing_key", "create"],
        cwd=project,
        env={**both, "DJANGO_SECRET_KEY": secrets.token_urlsafe(50)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, made.stderr
    key, keyring = Path(both["DESK_SIGNING_KEY_FILE"]), Path(both["DESK_VERIFY_KEYS_FILE"])
    install(key, 0o600, web, directory=False)
    install(key.parent, 0o700, web)
    assert keyring.stat().st_mode & 0o777 == 0o444 and keyring.stat().st_uid == 0
    # The audit key, the same on both, each user's copy in its own directory.
    for user, directory in ((web, paths["web_etc"]), (worker, paths["worker_etc"])):
        (directory / "audit_key").write_bytes(audit_key() + b"\n")
        install(directory / "audit_key", 0o600, user, directory=False)

    web_env = {
        **both,
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
        "DESK_VAR_DIR": str(paths["web_var"]),
        "DESK_AUDIT_KEY_FILE": str(paths["web_etc"] / "audit_key"),
    }
    worker_env = {
        **both,
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),  # not the web tier's
        "DESK_VAR_DIR": str(paths["worker_var"]),
        "DESK_AUDIT_KEY_FILE": str(paths["worker_etc"] / "audit_key"),
    }
    migrated = subprocess.run(
        web.command([*manage, "migrate", "--no-input"]),
        cwd=project,
        env=web_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert migrated.returncode == 0, migrated.stderr

    runs_as = {"web": (web, web_env), "worker": (worker, worker_env), "beat": (worker, worker_env)}
    processes = [
        AsUser(
            name,
            user.command(procfile_command(name, python, port)),
            tmp_path / f"{name}.log",
            env,
            cwd=project,
        )
        for name, (user, env) in runs_as.items()
    ]
    try:
        for process in processes:
            process.start()
        base = f"http://127.0.0.1:{port}"
        wait_until(lambda: _http_ok(base + "/accounts/login/"), timeout=90, what="daphne as desk-web")
        wait_until(
            lambda: " ready." in processes[1].log_text() or processes[1].popen.poll() is not None,
            timeout=90,
            what="the worker as desk-worker",
        )
        worker_log = processes[1].log_text()
        assert processes[1].popen.poll() is None, worker_log
        assert f"The signing key {key} is out of this worker's reach (permission denied)" in worker_log
        assert "PermissionError" not in worker_log and "refuses" not in worker_log

        _, carol = token_create(user=personas.carol, scopes=["submit"])
        _, alice = token_create(user=personas.alice, scopes=["review"])
        status, run = http(
            "POST",
            base + "/api/v1/runs",
            token=carol,
            body={
                "agent": "demo",
                "input": "Tell Ada.",
                "model": {"provider": "scripted", "script": SEND_EMAIL_SCRIPT},
            },
        )
        assert status == 201, run
        approval = wait_until(
            lambda: ApprovalRequest.objects.filter(run_id=run["id"]).first(),
            timeout=60,
            what="the approval",
            interval=0.2,
        )
        assert approval.tool == "send_email"
        status, decision = http(
            "POST",
            f"{base}/api/v1/approvals/{approval.id}/decision",
            token=alice,
            body={"verdict": "approve", "reason": "ok", "checkpoint_id": str(approval.checkpoint_id)},
        )
        assert status == 201, decision
        wait_until(
            lambda: Run.objects.get(pk=run["id"]).status in {RunStatus.SUCCEEDED, RunStatus.FAILED},
            timeout=90,
            what="the run to end",
            interval=0.2,
        )
        assert Run.objects.get(pk=run["id"]).status == RunStatus.SUCCEEDED, "\n".join(
            p.log_text()[-3000:] for p in processes
        )
        # The worker sent it, as desk-worker, into its own var/.
        sent = list((paths["worker_var"] / "outbox").iterdir())
        assert sent and all(path.stat().st_uid == worker.uid for path in sent)
        assert "ada@example.com" in "".join(path.read_text() for path in sent)
        assert Attempt.objects.filter(run_id=run["id"]).exists()
        # The web's var/ kept its mode, and holds nothing of the worker's.
        assert paths["web_var"].stat().st_mode & 0o777 == 0o700
        assert not (paths["web_var"] / "outbox").exists()
    finally:
        for process in processes:
            process.stop()
