"""The mutation list (tests/mutants.toml) still points at real guard lines and real tests.

`make mutants` runs the mutations; this only checks, in `make test`, that each entry would
mutate something: an edit that moves or rewrites a listed guard fails here, not silently.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.mutants import DEFAULT_LIST, ROOT, load, problems

MUTANTS = load(DEFAULT_LIST)


def test_the_list_is_not_empty():
    assert MUTANTS


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_each_listed_snippet_occurs_once_and_its_tests_exist(mutant):
    assert problems(mutant, ROOT) == []


def test_a_snippet_that_no_longer_occurs_is_reported(tmp_path: Path):
    mutant = MUTANTS[0]
    (tmp_path / mutant.file).parent.mkdir(parents=True)
    (tmp_path / mutant.file).write_text("# the guard was rewritten\n")
    for node in mutant.tests:
        (tmp_path / node.split("::")[0]).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / node.split("::")[0]).write_text("")
    assert problems(mutant, tmp_path) == [
        f"its original snippet occurs 0 times in {mutant.file} (must be exactly once)"
    ]


def test_every_named_killing_test_is_collected():
    """A renamed or deleted test leaves its mutants with nothing to kill them, and `make mutants`
    then stops at its baseline: pytest must collect every node id the list names."""
    import subprocess
    import sys

    nodes = sorted({node for mutant in MUTANTS for node in mutant.tests})
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *nodes],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    missing = [line for line in done.stdout.splitlines() + done.stderr.splitlines() if "not found" in line]
    assert done.returncode == 0 and not missing, "\n".join(missing) or done.stdout[-2000:]
