"""The desk takes no savepoint by hand (a static check of its source, no database).

`serialize_writers` (reviewdesk/lib/db.py) marks the writers' lock as held with a commit hook.
Django drops an atomic block's hooks when that block's savepoint rolls back, as PostgreSQL
releases the lock there; a savepoint taken with `transaction.savepoint()` is carried by no
hook, so rolling it back would release the lock and keep the mark, and the next audit row or
desk event of the transaction would skip the lock (a forked audit chain, events out of
commit order). Use `transaction.atomic()` for a savepoint.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
MANUAL = re.compile(r"\bsavepoint(_rollback|_commit)?\s*\(")


def test_no_desk_or_runtime_module_takes_a_savepoint_by_hand():
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for package in ("reviewdesk", "agents")
        for path in sorted((ROOT / package).rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if MANUAL.search(line) and not line.lstrip().startswith("#")
    ]
    assert found == [], "use transaction.atomic() instead:\n" + "\n".join(found)


def test_the_check_finds_a_savepoint_taken_by_hand():
    assert MANUAL.search("    sid = transaction.savepoint()")
    assert MANUAL.search("transaction.savepoint_rollback(sid)")
    assert not MANUAL.search("with transaction.atomic(savepoint=False):")
