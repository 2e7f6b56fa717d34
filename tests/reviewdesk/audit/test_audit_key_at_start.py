"""A production web process without the audit key refuses to start, instead of starting and
refusing its first audited write (a login, a decision). The worker's refusal is tested with
the other start-up checks, in tests/reviewdesk/test_worker_keys.py.

Each case starts a real process (daphne, as the Procfile's `web` does, manage.py, or an
interpreter importing the ASGI application) with a clean environment, in a production
configuration unless the case changes it: DJANGO_DEBUG off, REDIS_URL set (nothing here
connects to it), and not a test process (DESK_TESTING unset).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
EX_CONFIG = 78
BOTH_SETTINGS = ("DESK_AUDIT_KEY", "DESK_AUDIT_KEY_FILE")


def production_env(tmp_path: Path, **variables: str) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "DJANGO_SETTINGS_MODULE": "reviewdesk.settings",
        "DESK_VAR_DIR": str(tmp_path / "var"),
        "DJANGO_DEBUG": "0",
        "REDIS_URL": "redis://127.0.0.1:1/0",
        **variables,
    }


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_daphne(tmp_path: Path, port: int, **variables: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "reviewdesk.asgi:application"],
        cwd=REPO,
        env=production_env(tmp_path, **variables),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )


def manage(tmp_path: Path, *args: str, **variables: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO,
        env=production_env(tmp_path, **variables),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_production_web_process_without_the_audit_key_refuses_to_start(tmp_path):
    key_file = tmp_path / "no-audit-key"
    web = start_daphne(tmp_path, free_port(), DESK_AUDIT_KEY_FILE=str(key_file))
    try:
        _, stderr = web.communicate(timeout=60)  # it refuses in seconds; serving, it never ends
    except subprocess.TimeoutExpired:
        web.kill()
        web.communicate()
        pytest.fail("daphne started and kept serving without the audit key")

    assert web.returncode == EX_CONFIG, stderr
    assert "reviewdesk web refuses to start: no audit key in a production configuration" in stderr
    assert all(name in stderr for name in BOTH_SETTINGS) and str(key_file) in stderr
    assert not key_file.exists()  # none made here: its rows would verify on this host only


@pytest.mark.parametrize("provided", ["DESK_AUDIT_KEY", "DESK_AUDIT_KEY_FILE"])
def test_a_production_web_process_with_the_audit_key_provided_serves(tmp_path, provided):
    key_file = tmp_path / "audit_key"
    variables = {"DESK_AUDIT_KEY_FILE": str(key_file)}
    if provided == "DESK_AUDIT_KEY":
        variables["DESK_AUDIT_KEY"] = "provided by the operator"
    else:
        key_file.write_text("provided by the operator\n")
    port = free_port()
    web = start_daphne(tmp_path, port, **variables)
    try:
        deadline, status = time.monotonic() + 90, None
        while status is None and time.monotonic() < deadline and web.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/accounts/login/", timeout=5) as page:
                    status = page.status
            except OSError:
                time.sleep(0.3)
        assert status == 200, web.stderr.read() if web.poll() is not None else "no answer"
    finally:
        web.terminate()
        web.communicate(timeout=30)


def test_manage_py_check_and_migrate_name_the_missing_key_and_stop(tmp_path):
    """The same rule is a system check: `check --deploy` lists it, and a command that runs the
    checks (migrate, runserver, create_token, ...) stops before it does anything."""
    key_file = tmp_path / "no-audit-key"

    check = manage(tmp_path, "check", "--deploy", DESK_AUDIT_KEY_FILE=str(key_file))
    migrate = manage(tmp_path, "migrate", DESK_AUDIT_KEY_FILE=str(key_file))

    for command in (check, migrate):
        assert command.returncode != 0, command.stdout
        assert "audit.E001" in command.stderr
        assert all(name in command.stderr for name in BOTH_SETTINGS) and str(key_file) in command.stderr
    assert "Applying" not in migrate.stdout


def test_an_operator_can_still_open_a_shell_without_the_key(tmp_path):
    """A command that runs no checks still works: an operator can make the key from there."""
    shell = manage(
        tmp_path,
        "shell",
        "-c",
        "import secrets; print(len(secrets.token_urlsafe(32)))",
        DESK_AUDIT_KEY_FILE=str(tmp_path / "no-audit-key"),
    )
    assert (shell.returncode, shell.stdout.strip().splitlines()[-1]) == (0, "43"), shell.stderr


@pytest.mark.parametrize(
    "variables",
    [{"REDIS_URL": ""}, {"DESK_TESTING": "1"}, {"DJANGO_DEBUG": "1"}],
    ids=["the embedded default", "a test process", "DEBUG on"],
)
def test_outside_a_production_configuration_the_web_application_loads_without_a_key(tmp_path, variables):
    loaded = subprocess.run(
        [sys.executable, "-c", "import reviewdesk.asgi; print('loaded')"],
        cwd=REPO,
        env=production_env(tmp_path, DESK_AUDIT_KEY_FILE=str(tmp_path / "no-audit-key"), **variables),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (loaded.returncode, loaded.stdout.strip()) == (0, "loaded"), loaded.stderr
