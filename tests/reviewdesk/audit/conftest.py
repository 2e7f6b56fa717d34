from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def anchor_file(settings, tmp_path):
    """Each test its own anchor file: the database is rolled back between tests, the file would not be."""
    settings.DESK_AUDIT_ANCHOR_FILE = tmp_path / "audit_anchors.jsonl"
    return settings.DESK_AUDIT_ANCHOR_FILE


@pytest.fixture(autouse=True)
def check_file(settings, tmp_path):
    """Each test its own record of the last full check, outside the database for the same reason."""
    settings.DESK_AUDIT_CHECK_FILE = tmp_path / "audit_check.json"
    return settings.DESK_AUDIT_CHECK_FILE


@pytest.fixture(autouse=True)
def sweep_file(settings, tmp_path):
    """Each test its own record of the last sweep (and so its own position round the chain)."""
    settings.DESK_AUDIT_SWEEP_FILE = tmp_path / "audit_sweep.json"
    return settings.DESK_AUDIT_SWEEP_FILE
