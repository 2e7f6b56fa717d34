from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def anchor_file(settings, tmp_path):
    """Each test its own anchor file: the database is rolled back between tests, the file would not be."""
    settings.DESK_AUDIT_ANCHOR_FILE = tmp_path / "audit_anchors.jsonl"
    return settings.DESK_AUDIT_ANCHOR_FILE
