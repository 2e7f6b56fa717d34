"""Keys held apart: a production worker refuses to start when it could forge an approval, or
when it lacks the audit key every writer needs.

Real `celery -A reviewdesk worker` processes, in a production configuration
(DJANGO_DEBUG off, REDIS_URL set, not a test process: DESK_TESTING unset), on
their own queue so they take none of the suite's tasks.

The suite runs as root, and root reads every file: "unreadable" is a key path
that does not exist for the worker, and "read-only" is a keyring with no write
bit in a directory with none (the check reads modes for root; see
`reviewdesk.approvals.signing.worker_key_problems`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from django.conf import settings

from reviewdesk.approvals import signing
from reviewdesk.audit.keys import audit_key
from reviewdesk.lib.deployment import is_production_configuration
from tests import two_users

REPO = Path(__file__).resolve().parents[2]
AS_ROOT = os.geteuid() == 0


def start_worker(tmp_path: Path, *, key_file: Path, keyring: Path, **extra_env: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "DESK_TESTING"}
    env.update(
        DJANGO_DEBUG="0",
        REDIS_URL=settings.REDIS_URL or f"redis+socket://{settings.EMBEDDED_REDIS_SOCKET}",
        DESK_CELERY_QUEUE=f"worker-keys-{uuid.uuid4().hex[:8]}",
        DESK_SIGNING_KEY_FILE=str(key_file),
        DESK_VERIFY_KEYS_FILE=str(keyring),
        **extra_env,
    )
    log = (tmp_path / "worker.log").open("wb")
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "reviewdesk", "worker", "-l", "INFO", "--concurrency", "1"],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )


def wait_for(process: subprocess.Popen, log: Path, *, ready: bool, timeout: float = 90) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        if process.poll() is not None or (ready and " ready." in text):
            return text
        time.sleep(0.2)
    process.kill()
    raise AssertionError(f"the worker neither exited nor became ready:\n{log.read_text(errors='replace')}")


@pytest.fixture
def keys(tmp_path, redis_server):
    signing.ensure_keys()
    audit_key()  # the suite's audit key file, which the workers inherit: made here if not yet
    public = tmp_path / "public"
    public.mkdir()
    keyring = public / "verify_keys.json"
    shutil.copy(settings.DESK_VERIFY_KEYS_FILE, keyring)
    yield Path(settings.DESK_SIGNING_KEY_FILE), keyring
    public.chmod(0o755)


def test_a_production_worker_that_can_read_the_private_key_refuses_to_start(tmp_path, keys):
    private, keyring = keys
    keyring.chmod(0o444)
    keyring.parent.chmod(0o555)

    worker = start_worker(tmp_path, key_file=private, keyring=keyring)
    log = wait_for(worker, tmp_path / "worker.log", ready=False)

    assert worker.returncode == 78, log
    assert f"refuses to start: it can read the private signing key {private}" in log
    assert " ready." not in log


def test_a_production_worker_that_can_write_its_keyring_refuses_to_start(tmp_path, keys):
    _, keyring = keys
    keyring.chmod(0o644)

    worker = start_worker(tmp_path, key_file=tmp_path / "no-such-key.pem", keyring=keyring)
    log = wait_for(worker, tmp_path / "worker.log", ready=False)

    assert worker.returncode == 78, log
    assert "refuses to start" in log and str(keyring) in log
    assert "private signing key" not in log


def test_a_production_worker_with_public_keys_only_read_only_starts(tmp_path, keys):
    _, keyring = keys
    keyring.chmod(0o444)
    keyring.parent.chmod(0o555)

    worker = start_worker(tmp_path, key_file=tmp_path / "no-such-key.pem", keyring=keyring)
    try:
        log = wait_for(worker, tmp_path / "worker.log", ready=True)
        assert worker.poll() is None, log
        assert "refuses" not in log
    finally:
        worker.terminate()
        worker.wait(timeout=30)


def test_a_production_worker_that_requires_device_keys_without_a_trust_file_refuses_to_start(tmp_path, keys):
    """Device keys required, public keys held properly, but no pinned roots: it would refuse
    every decision, so it says so at start."""
    _, keyring = keys
    keyring.chmod(0o444)
    keyring.parent.chmod(0o555)

    worker = start_worker(
        tmp_path,
        key_file=tmp_path / "no-such-key.pem",
        keyring=keyring,
        DESK_REQUIRE_DEVICE_KEYS="1",
        DESK_TRUST_FILE=str(tmp_path / "no-trust.json"),
    )
    log = wait_for(worker, tmp_path / "worker.log", ready=False)

    assert worker.returncode == 78, log
    assert "device keys are required (DESK_REQUIRE_DEVICE_KEYS) and no trust file" in log
    assert " ready." not in log


def test_a_production_worker_without_the_audit_key_refuses_to_start(tmp_path, keys):
    """It writes audit rows with every step it commits: without the key it would start, take a
    run and refuse its first audited write. It says so at start instead."""
    _, keyring = keys
    keyring.chmod(0o444)
    keyring.parent.chmod(0o555)
    key_file = tmp_path / "no-audit-key"

    worker = start_worker(
        tmp_path,
        key_file=tmp_path / "no-such-key.pem",
        keyring=keyring,
        DESK_AUDIT_KEY="",
        DESK_AUDIT_KEY_FILE=str(key_file),
    )
    try:  # returns once it exits, or (as it did before it checked the key) once it is ready
        log = wait_for(worker, tmp_path / "worker.log", ready=True)
    finally:
        if worker.poll() is None:
            worker.terminate()
            worker.wait(timeout=30)

    assert worker.returncode == 78, log
    assert "reviewdesk worker refuses to start: no audit key in a production configuration" in log
    assert "DESK_AUDIT_KEY," in log and f"{key_file} (DESK_AUDIT_KEY_FILE)" in log
    assert " ready." not in log and not key_file.exists()


@pytest.mark.skipif(not AS_ROOT, reason="the mode check is the root branch")
def test_as_root_a_keyring_in_a_writable_directory_counts_as_writable(tmp_path, keys, settings):
    _, keyring = keys
    keyring.chmod(0o444)  # but its directory is 0755: root could replace the file by a rename
    settings.DESK_VERIFY_KEYS_FILE = keyring
    settings.DESK_SIGNING_KEY_FILE = tmp_path / "no-such-key.pem"

    assert signing.worker_key_problems() == [
        f"it runs as root and {keyring.parent} has a write bit (mode 755)"
    ]


def test_the_embedded_default_and_test_processes_are_not_a_production_configuration(settings, monkeypatch):
    settings.DEBUG, settings.DATABASE_URL, settings.REDIS_URL = False, "", "redis://127.0.0.1:6379/0"
    monkeypatch.delenv("DESK_TESTING")
    assert is_production_configuration()
    settings.REDIS_URL = ""
    assert not is_production_configuration()
    settings.DATABASE_URL = "postgres://db/desk"
    settings.DEBUG = True
    assert not is_production_configuration()
    settings.DEBUG = False
    monkeypatch.setenv("DESK_TESTING", "1")
    assert not is_production_configuration()


# --- as a user of its own (docs/running.md: web and worker as different users) ---------------


@pytest.fixture
def worker_user(redis_server):
    """A system user, a python it can run, and a scratch root it can enter; Redis over TCP (the
    embedded Redis's socket sits in root's 0700 var/)."""
    reason = two_users.why_not()
    if reason:
        pytest.skip(reason)
    if not settings.REDIS_URL:
        pytest.skip(
            "the worker's user cannot reach the embedded Redis's socket in root's var/: needs REDIS_URL"
        )
    with two_users.shared_directory() as root, two_users.system_users("desk-worker") as users:
        python, python_env = two_users.shared_python(root)
        yield users["desk-worker"], python, python_env, root, two_users.project_tree(root)


def start_worker_as(
    user, python, python_env, root: Path, project: Path, *, key_file: Path, keyring: Path
) -> subprocess.Popen:
    var_dir = root / "worker-var"
    var_dir.mkdir()
    os.chown(var_dir, user.uid, user.gid)
    (root / "audit_key").write_bytes(audit_key() + b"\n")
    os.chown(root / "audit_key", user.uid, user.gid)
    (root / "audit_key").chmod(0o600)
    env = {
        "PATH": os.environ["PATH"],
        **python_env,
        "DJANGO_DEBUG": "0",
        "DJANGO_SECRET_KEY": "worker-" + uuid.uuid4().hex * 2,
        "REDIS_URL": settings.REDIS_URL,
        "DESK_VAR_DIR": str(var_dir),
        "DESK_AUDIT_KEY_FILE": str(root / "audit_key"),
        "DESK_CELERY_QUEUE": f"worker-keys-{uuid.uuid4().hex[:8]}",
        "DESK_SIGNING_KEY_FILE": str(key_file),
        "DESK_VERIFY_KEYS_FILE": str(keyring),
    }
    log = (root / "worker.log").open("wb")
    command = [str(python), "-m", "celery", "-A", "reviewdesk", "worker", "-l", "INFO", "--concurrency", "1"]
    return subprocess.Popen(
        user.command(command),
        cwd=project,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )


def root_owned_keys(root: Path, *, key_dir_mode: int, key_mode: int) -> tuple[Path, Path]:
    """The web's key in a root-owned directory of `key_dir_mode`, the keyring 0444 in a 0755 one."""
    (root / "web").mkdir(mode=key_dir_mode)
    (root / "web").chmod(key_dir_mode)
    key_file = root / "web" / "signing_key.pem"
    shutil.copy(settings.DESK_SIGNING_KEY_FILE, key_file)
    key_file.chmod(key_mode)
    (root / "public").mkdir()
    (root / "public").chmod(0o755)
    keyring = root / "public" / "verify_keys.json"
    shutil.copy(settings.DESK_VERIFY_KEYS_FILE, keyring)
    keyring.chmod(0o444)
    return key_file, keyring


def test_a_worker_whose_key_path_it_cannot_enter_says_the_key_is_out_of_reach_and_starts(worker_user):
    """It used to die in the check itself: Path.exists() raised PermissionError, which Celery
    logged as a broken signal handler."""
    signing.ensure_keys()
    user, python, python_env, root, project = worker_user
    key_file, keyring = root_owned_keys(root, key_dir_mode=0o700, key_mode=0o600)

    worker = start_worker_as(user, python, python_env, root, project, key_file=key_file, keyring=keyring)
    try:
        log = wait_for(worker, root / "worker.log", ready=True)
        assert worker.poll() is None, log
        assert f"The signing key {key_file} is out of this worker's reach (permission denied)" in log
        assert "PermissionError" not in log and "refuses" not in log
    finally:
        worker.terminate()
        worker.wait(timeout=30)


def test_a_worker_user_that_can_read_the_key_still_refuses_to_start(worker_user):
    signing.ensure_keys()
    user, python, python_env, root, project = worker_user
    key_file, keyring = root_owned_keys(root, key_dir_mode=0o755, key_mode=0o644)

    worker = start_worker_as(user, python, python_env, root, project, key_file=key_file, keyring=keyring)
    log = wait_for(worker, root / "worker.log", ready=False)

    assert worker.returncode == 78, log
    assert f"refuses to start: it can read the private signing key {key_file}" in log
    assert "out of this worker's reach" not in log
