"""The apps' migrations start from one squashed initial migration each (approvals two: its keys
to runs follow runs' own table), and every later one is named for what it does, never with
Django's automatic names. No database: it reads the migration files."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "reviewdesk"
AUTOMATIC = re.compile(r"^\d{4}_(auto_\d{8}_\d{4}|.*_and_more)$")


def migrations() -> dict[str, list[str]]:
    return {
        folder.parent.name: sorted(p.stem for p in folder.glob("0*.py"))
        for folder in ROOT.glob("*/migrations")
    }


def test_every_app_starts_from_one_initial_migration():
    found = migrations()
    assert found, "no migrations found"
    for app, names in found.items():
        assert names[0] == "0001_initial", app
    assert found["approvals"][:2] == ["0001_initial", "0002_requests_name_their_runs"]


def test_no_migration_has_an_automatic_name():
    automatic = [
        f"{app}/{name}" for app, names in migrations().items() for name in names if AUTOMATIC.match(name)
    ]
    assert automatic == []
