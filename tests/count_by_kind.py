"""Count the suite's tests by what they run on, for docs/testing.md: `python tests/count_by_kind.py`.

Collects the suite (nothing runs) and sorts every test into one kind:

- real processes, the desk's stack: marked `e2e`, in tests/e2e. They start daphne
  and a Celery worker as subprocesses on the real Redis broker and the test
  database (some add beat, or drive headless Chromium), and talk to them over
  HTTP and WebSockets.
- a real browser only: marked `e2e`, elsewhere (the desk's *_in_browser tests).
  Headless Chromium is a real process, but the page is rendered in-process by
  Django's test client and its socket is a stand-in the test drives.
- in-process, on the database: marked `django_db`. Services, task bodies,
  the API (DRF's test client) and the desk socket (channels'
  WebsocketCommunicator over the real Redis channel layer) run inside the test
  process; mail goes to Django's locmem outbox.
- runtime only: the rest of tests/agents. The agent runtime with its in-memory
  doubles (or the local LLM server, or a Redis store), no Django database.
- mutation-list checks: tests/test_mutants_list.py, one per entry of
  tests/mutants.toml, checking that its snippet and killing tests still exist
  (the mutations themselves run in `make mutants`, not here).
- other: the rest, such as the docs' checks and the e2e tests' own counters.

Extra arguments go to pytest, e.g. `python tests/count_by_kind.py tests/reviewdesk`.
"""

from __future__ import annotations

import contextlib
import io
import sys
from collections import Counter
from pathlib import Path

import pytest

KINDS = (
    "real processes, the desk's stack",
    "a real browser only",
    "in-process, on the database",
    "runtime only",
    "mutation-list checks",
    "other",
)
DATABASE_FIXTURES = {"db", "transactional_db", "django_db_reset_sequences", "django_db_serialized_rollback"}


def kind_of(item: pytest.Item) -> str:
    if item.get_closest_marker("e2e"):
        return KINDS[0] if item.nodeid.startswith("tests/e2e/") else KINDS[1]
    if item.nodeid.startswith("tests/test_mutants_list.py"):
        return KINDS[4]
    # The marker, or pytest-django's database fixtures reached through another fixture (a
    # test taking `interrupted_run` uses the database without a marker of its own).
    if item.get_closest_marker("django_db") or DATABASE_FIXTURES & set(getattr(item, "fixturenames", ())):
        return KINDS[2]
    if item.nodeid.startswith("tests/agents/"):
        return KINDS[3]
    return KINDS[5]


def details(item: pytest.Item) -> list[str]:
    """Finer facts about an in-process or runtime test, from its fixtures and module."""
    source = Path(str(item.fspath)).read_text()
    facts = []
    if "mailoutbox" in getattr(item, "fixturenames", ()):
        facts.append("reads Django's locmem outbox")
    if "WebsocketCommunicator" in source:
        facts.append("module uses channels' WebsocketCommunicator")
    if "agents.testing" in source or "from agents import testing" in source:
        facts.append("module uses the runtime's in-memory doubles (agents.testing)")
    return facts


class Counting:
    def __init__(self) -> None:
        self.kinds: Counter[str] = Counter()
        self.facts: Counter[tuple[str, str]] = Counter()
        self.files: Counter[tuple[str, str]] = Counter()

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            kind = kind_of(item)
            self.kinds[kind] += 1
            self.files[kind, item.nodeid.split("::")[0]] += 1
            for fact in details(item):
                self.facts[kind, fact] += 1


def main(args: list[str]) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: `tests` importable
    counting = Counting()
    output = io.StringIO()
    with contextlib.redirect_stdout(output):  # pytest's own listing; shown only when collection fails
        code = pytest.main(["--collect-only", "-qq", "-p", "no:cacheprovider", *args], plugins=[counting])
    if code not in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        print(output.getvalue())
        return int(code)
    print(f"{sum(counting.kinds.values())} tests")
    for kind in KINDS:
        print(f"{counting.kinds[kind]:5}  {kind}")
        for (fact_kind, fact), n in sorted(counting.facts.items()):
            if fact_kind == kind:
                print(f"{'':7}{n:5}  {fact}")
    print("\nby file:")
    for (kind, path), n in sorted(
        counting.files.items(), key=lambda entry: (KINDS.index(entry[0][0]), entry[0][1])
    ):
        print(f"{n:5}  {kind:34}  {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
