"""Fault injection is for test processes only: any other process with a switch set refuses to start.

Each case starts a real interpreter that loads the settings the way daphne,
Celery and manage.py do (django.setup()), with a clean environment: nothing
of this test process's own DESK_TESTING leaks in.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from reviewdesk.lib import faults

REPO = Path(__file__).resolve().parents[3]
STARTED = "django is set up"


def start(tmp_path: Path, **variables: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "DJANGO_SETTINGS_MODULE": "reviewdesk.settings",
        "DESK_VAR_DIR": str(tmp_path / "var"),
        **variables,
    }
    return subprocess.run(
        [sys.executable, "-c", f"import django; django.setup(); print({STARTED!r})"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    "switches",
    [
        {"DESK_FAULT_INJECTION": "1"},
        {"DESK_FAULT_NO_FENCING": "1"},
        {"DESK_FAULT_INJECTION": "1", "DESK_FAULT_NO_FENCING": "1"},
        {"DESK_FAULT_INJECTION": "true"},
        {"DESK_FAULT_INJECTION": "1", "DESK_TESTING": "yes"},
    ],
    ids=["injection", "no fencing", "both", "injection=true", "a marker other than 1"],
)
def test_a_process_with_a_fault_switch_and_no_test_marker_refuses_to_start(tmp_path, switches):
    process = start(tmp_path, **switches)

    assert process.returncode != 0
    assert STARTED not in process.stdout
    assert "ImproperlyConfigured" in process.stderr
    assert "set, but this is not a test process (DESK_TESTING=1 is not set)" in process.stderr
    for name in ("DESK_FAULT_INJECTION", "DESK_FAULT_NO_FENCING"):
        assert (name in process.stderr) == (name in switches)


@pytest.mark.parametrize(
    "variables",
    [
        {"DESK_FAULT_INJECTION": "1", "DESK_FAULT_NO_FENCING": "1", "DESK_TESTING": "1"},
        {},
        {"DESK_FAULT_INJECTION": "0", "DESK_FAULT_NO_FENCING": ""},
    ],
    ids=["switches with the test marker", "no switches", "switches explicitly off"],
)
def test_a_process_starts_with_the_test_marker_or_without_switches(tmp_path, variables):
    process = start(tmp_path, **variables)

    assert process.returncode == 0, process.stderr
    assert STARTED in process.stdout


def test_the_no_fencing_switch_is_inert_in_a_process_without_the_test_marker(monkeypatch):
    monkeypatch.setenv("DESK_FAULT_INJECTION", "1")
    monkeypatch.setenv("DESK_FAULT_NO_FENCING", "1")
    assert faults.fencing_disabled()  # the control: this test process carries the marker

    monkeypatch.delenv("DESK_TESTING")

    assert not faults.fencing_disabled()
