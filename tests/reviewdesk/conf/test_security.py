"""Security settings: what production turns off, what every response carries, what files var/ holds."""

from __future__ import annotations

import os
import secrets
import sqlite3
import stat
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from reviewdesk.conf import var
from reviewdesk.runs.models import Run
from tests.conftest import SEND_EMAIL_SCRIPT

ROOT = Path(__file__).resolve().parents[3]
SCRIPTED = {"agent": "demo", "input": "Hi", "model": {"provider": "scripted", "script": SEND_EMAIL_SCRIPT}}


def settings_in_subprocess(tmp_path: Path, expression: str, **environ: str) -> str:
    """Evaluate `expression` on the settings imported by a fresh process with only `environ` set."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DESK_", "DATABASE_", "REDIS_"))
    }
    env.update(
        {"DESK_VAR_DIR": str(tmp_path / "var"), "DJANGO_SETTINGS_MODULE": "reviewdesk.settings", **environ}
    )
    code = f"from django.conf import settings; print({expression})"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


# --- the scripted provider -----------------------------------------------------------


@pytest.mark.django_db
def test_a_scripted_run_is_refused_with_422_when_the_setting_is_off(personas, api_as, settings):
    settings.DESK_ALLOW_SCRIPTED_MODEL = False

    response = api_as(personas.carol, "submit").post("/api/v1/runs", SCRIPTED, format="json")

    assert response.status_code == 422, response.content
    assert response["Content-Type"] == "application/problem+json"
    assert "scripted provider is disabled" in response.json()["errors"]["model"][0]
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_a_scripted_run_is_accepted_when_the_setting_is_on(personas, api_as, settings):
    settings.DESK_ALLOW_SCRIPTED_MODEL = True

    response = api_as(personas.carol, "submit").post("/api/v1/runs", SCRIPTED, format="json")

    assert response.status_code == 201, response.content


def test_the_scripted_provider_is_on_in_the_embedded_default_and_off_in_production(tmp_path):
    production = {"DATABASE_URL": "postgres://desk@db.invalid/desk", "DJANGO_SECRET_KEY": "x" * 60}

    assert settings_in_subprocess(tmp_path, "settings.DESK_ALLOW_SCRIPTED_MODEL") == "True"
    assert settings_in_subprocess(tmp_path, "settings.DESK_ALLOW_SCRIPTED_MODEL", **production) == "False"
    assert (
        settings_in_subprocess(
            tmp_path, "settings.DESK_ALLOW_SCRIPTED_MODEL", **production, DESK_ALLOW_SCRIPTED_MODEL="1"
        )
        == "True"
    )


# --- deployment settings ---------------------------------------------------------------


def production_example() -> dict[str, str]:
    """The production example of .env.example, with a freshly drawn secret key."""
    lines = (ROOT / ".env.example").read_text().splitlines()
    block = lines[lines.index("# production-example-begin") + 1 : lines.index("# production-example-end")]
    environ = dict(line.removeprefix("# ").split("=", 1) for line in block)
    environ["DJANGO_SECRET_KEY"] = secrets.token_urlsafe(50)
    return environ


def test_check_deploy_prints_nothing_for_the_production_example(tmp_path):
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DESK_", "DATABASE_", "REDIS_"))
    }
    env.update(production_example(), DESK_VAR_DIR=str(tmp_path / "var"))
    # The example's audit key file, as the operator provides it (without it the check stops).
    env["DESK_AUDIT_KEY_FILE"] = str(tmp_path / "audit_key")
    (tmp_path / "audit_key").write_text(secrets.token_urlsafe(32) + "\n")

    done = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    issues = [line for line in done.stderr.splitlines() if line.startswith("?: (")]
    assert issues == [], done.stderr
    assert "System check identified no issues" in done.stdout, done.stdout + done.stderr


# --- login throttling ---------------------------------------------------------------------


@pytest.mark.django_db
def test_the_login_page_locks_out_a_username_after_the_failure_limit_even_for_the_right_password(
    personas, client, settings
):
    personas.alice.set_password("right-password")
    personas.alice.save()
    assert settings.AXES_FAILURE_LIMIT == 5

    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        response = client.post("/accounts/login/", {"username": "alice", "password": "guess"})
        assert response.status_code == 200  # the form again, with its error
    response = client.post("/accounts/login/", {"username": "alice", "password": "guess"})
    assert response.status_code == 429  # the fifth failure locks the pair out
    response = client.post("/accounts/login/", {"username": "alice", "password": "right-password"})

    assert response.status_code == 429
    assert "_auth_user_id" not in client.session


@pytest.mark.django_db
def test_a_login_before_the_limit_still_works(personas, client, settings):
    personas.alice.set_password("right-password")
    personas.alice.save()

    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        client.post("/accounts/login/", {"username": "alice", "password": "guess"})
    response = client.post("/accounts/login/", {"username": "alice", "password": "right-password"})

    assert response.status_code == 302
    assert client.session["_auth_user_id"] == str(personas.alice.pk)


# --- Content-Security-Policy ------------------------------------------------------------


@pytest.mark.django_db
def test_every_page_carries_a_csp_that_allows_no_inline_script(client):
    response = client.get("/accounts/login/")

    policy = dict(part.strip().split(" ", 1) for part in response["Content-Security-Policy"].split(";"))
    assert policy["script-src"] == "'self'"
    assert "unsafe-inline" not in response["Content-Security-Policy"]
    assert policy["frame-ancestors"] == "'none'"


# --- var/ -----------------------------------------------------------------------------------


def test_var_is_created_0700_and_tightened_when_it_was_looser(tmp_path):
    fresh = var.ensure_var_dir(tmp_path / "fresh" / "var")
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    loose.chmod(0o755)

    var.ensure_var_dir(loose)

    assert stat.S_IMODE(fresh.stat().st_mode) == 0o700
    assert stat.S_IMODE(loose.stat().st_mode) == 0o700


def test_settings_write_nothing_at_import_in_a_production_configuration(tmp_path):
    """A worker whose DESK_VAR_DIR it cannot enter (the web's 0700 var/) must still import the
    settings: with the secret key and the database given, importing them touches no file."""
    static_root = settings_in_subprocess(
        tmp_path,
        "settings.STATIC_ROOT",
        DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
        DATABASE_URL="postgres://desk@db.invalid:5432/desk",
        REDIS_URL="redis://redis.invalid:6379/0",
    )

    assert static_root == str(tmp_path / "var" / "staticfiles")
    assert not (tmp_path / "var").exists()


def test_the_embedded_default_makes_its_var_0700_with_its_database_and_secret(tmp_path):
    settings_in_subprocess(tmp_path, "settings.SECRET_KEY[:0]")

    assert stat.S_IMODE((tmp_path / "var").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "var" / "db.sqlite3").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "var" / "secret_key").stat().st_mode) == 0o600


def test_the_web_process_makes_static_root_in_its_var_kept_0700(tmp_path):
    root = var.ensure_static_root(tmp_path / "var" / "staticfiles", tmp_path / "var")

    assert root.is_dir() and stat.S_IMODE((tmp_path / "var").stat().st_mode) == 0o700


def test_the_sqlite_database_and_its_journal_files_are_0600(tmp_path):
    path = var.ensure_private_file(tmp_path / "db.sqlite3")
    old = tmp_path / "old.sqlite3"
    old.write_text("")
    old.chmod(0o644)
    var.ensure_private_file(old)

    connection = sqlite3.connect(path)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("CREATE TABLE t (x)")
    connection.commit()

    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
    connection.close()
    assert modes == {
        "db.sqlite3": 0o600,
        "db.sqlite3-wal": 0o600,
        "db.sqlite3-shm": 0o600,
        "old.sqlite3": 0o600,
    }


def test_the_embedded_defaults_var_and_database_are_private(tmp_path):
    var = tmp_path / "var"
    assert settings_in_subprocess(tmp_path, "settings.DATABASES['default']['NAME']") == str(
        var / "db.sqlite3"
    )

    assert stat.S_IMODE(var.stat().st_mode) == 0o700
    assert stat.S_IMODE((var / "db.sqlite3").stat().st_mode) == 0o600
    assert stat.S_IMODE((var / "secret_key").stat().st_mode) == 0o600


def test_threads_making_one_secret_at_once_all_read_the_one_that_won(tmp_path, monkeypatch):
    """Eight threads find the secret missing, then meet just before creating it (as the web
    process and a worker do on a first start): none fails, all return the one value in the file,
    which is 0600, and no draft is left beside it."""
    path = tmp_path / "var" / "audit.key"
    gate = threading.Barrier(8)
    token = secrets.token_urlsafe

    def at_once(nbytes):
        gate.wait(timeout=10)
        return token(nbytes)

    monkeypatch.setattr(var.secrets, "token_urlsafe", at_once)
    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(var.read_or_create_secret, path, nbytes=32) for _ in range(8)]
        outcomes = [f.exception() or f.result() for f in futures]

    assert not [o for o in outcomes if isinstance(o, BaseException)], outcomes
    assert set(outcomes) == {path.read_text().strip()} and len(path.read_text().strip()) > 20
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in path.parent.iterdir()) == ["audit.key"]
