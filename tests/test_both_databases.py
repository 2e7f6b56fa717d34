"""The list of tests CI runs on both databases names only paths that exist (in-process, no
database): a renamed or moved file would otherwise leave it silently unproved on one of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import BOTH_DATABASES

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("prefix", BOTH_DATABASES)
def test_each_path_run_on_both_databases_exists(prefix):
    path = ROOT / prefix
    assert path.is_dir() if prefix.endswith("/") else path.is_file(), prefix
