"""Checkpoint storage holds the line: linear in the conversation, bounded against the raw bytes.

Figure #5 of `make bench` (bench/storage.py) measured through the desk's real write path
(DatabaseHost.commit_step); here it is asserted as ratios, which do not depend on the
machine. The issue's target is 1.5x the raw message bytes. Since v6 snapshots refer to the
log for an open batch's calls, and a row keeps its message count in its column only, the
store holds about 1.28x on SQLite and 1.47x on PostgreSQL (1.56x and 1.78x with v5), so the
line held here is the target, and any growth beyond linear fails.
"""

from __future__ import annotations

import pytest

from bench.storage import footprint

pytestmark = [pytest.mark.bench, pytest.mark.django_db]


def test_a_200_message_run_stores_within_1_5_times_its_raw_message_bytes(personas):
    stored = footprint(personas.carol, 200)
    assert stored["ratio"] <= 1.5, stored


def test_storage_grows_linearly_with_the_conversation(personas):
    """Twice the messages, twice the bytes (within 10%), and the last checkpoint no bigger than the first
    plus a little: no checkpoint copies the conversation."""
    at_100, at_200 = footprint(personas.carol, 100), footprint(personas.carol, 200)
    assert 1.9 <= at_200["stored"] / at_100["stored"] <= 2.2, (at_100, at_200)
    assert at_200["last_checkpoint"] < 2 * at_200["first_checkpoint"] + 200, at_200
