"""`.env.example` lists every variable the settings read (it says so on its first line). No
database: it reads the two files."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_every_variable_the_settings_read_is_in_env_example():
    sources = [ROOT / "reviewdesk" / "settings.py", *sorted((ROOT / "reviewdesk" / "conf").glob("*.py"))]
    read = {
        name
        for source in sources
        for name in re.findall(r'env_\w+\(\s*"([A-Z][A-Z0-9_]+)"', source.read_text())
    }
    listed = set(re.findall(r"\b([A-Z][A-Z0-9_]{2,})=", (ROOT / ".env.example").read_text()))
    assert read, "no variables found: the pattern no longer matches how settings read them"
    assert sorted(read - listed) == []
