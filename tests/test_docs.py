"""The README and docs/ name only files that exist and make targets the Makefile has (no
database, no processes: it reads the text). Links between the pages are MkDocs's to check
(`make docs`, strict)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# A path into the tree, as the pages write them in code spans: `reviewdesk/approvals/access.py`.
PATH = re.compile(r"`((?:reviewdesk|agents|tests|bench|static|templates|examples)/[\w./-]+?)(?::[\w.]+)?`")
TARGET = re.compile(r"`make ([a-z][\w-]*)")


def test_every_file_the_pages_name_exists():
    missing = [
        f"{page.relative_to(ROOT)}: {path}"
        for page in PAGES
        for path in PATH.findall(page.read_text())
        if not (ROOT / path.rstrip("/.")).exists()
    ]
    assert missing == []


def test_every_make_target_the_pages_name_is_in_the_makefile():
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][\w-]*):", makefile, re.M))
    named = {target for page in PAGES for target in TARGET.findall(page.read_text())}
    assert named - targets == set()
