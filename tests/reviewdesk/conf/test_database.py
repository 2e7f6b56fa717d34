"""What the desk asks of PostgreSQL when it connects (reviewdesk/conf/database.py): the
settings built in-process from a DATABASE_URL, and, on PostgreSQL, what the test database's
real connection reports."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.db import connection

from reviewdesk.conf.database import database_settings


@pytest.fixture(autouse=True)
def default_jit_setting(monkeypatch):
    monkeypatch.delenv("DESK_DB_JIT_OFF", raising=False)


def options_for(url: str, var_dir: Path = Path("/nonexistent")) -> dict:
    return database_settings(url, var_dir)["default"].get("OPTIONS", {})


def test_a_postgresql_connection_starts_with_jit_off():
    assert options_for("postgres://desk@db.example/desk")["options"] == "-c jit=off"


def test_options_in_the_url_are_kept_and_a_url_that_sets_jit_itself_wins():
    kept = options_for("postgres://desk@db.example/desk?options=-c%20statement_timeout%3D5000")
    assert kept["options"] == "-c statement_timeout=5000 -c jit=off"
    assert options_for("postgres://desk@db.example/desk?options=-c%20jit%3Don")["options"] == "-c jit=on"
    assert options_for("postgres://desk@db.example/desk?options=--jit%3Don")["options"] == "--jit=on"


def test_a_url_setting_another_jit_parameter_still_gets_jit_off():
    given = options_for("postgres://desk@db.example/desk?options=-c%20jit_above_cost%3D1000000")
    assert given["options"] == "-c jit_above_cost=1000000 -c jit=off"


def test_jit_off_set_to_0_sends_no_startup_option(monkeypatch):
    monkeypatch.setenv("DESK_DB_JIT_OFF", "0")
    assert "options" not in options_for("postgres://desk@db.example/desk")


def test_the_embedded_sqlite_gets_no_postgresql_option(tmp_path):
    assert "options" not in options_for("", tmp_path)


@pytest.mark.django_db
@pytest.mark.skipif(connection.vendor != "postgresql", reason="a PostgreSQL setting")
@pytest.mark.skipif(
    os.environ.get("DESK_DB_JIT_OFF", "1") in ("0", "false", "no", "off"), reason="turned off"
)
def test_the_desks_own_postgresql_connection_runs_with_jit_off():
    """PostgreSQL's default is on; at 100,000 runs a reviewer's grants page spent 505 ms
    compiling."""
    with connection.cursor() as cursor:
        cursor.execute("SHOW jit")
        assert cursor.fetchone()[0] == "off"
