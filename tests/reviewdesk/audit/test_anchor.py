"""Beat's anchor task: the chain head, signed, appended outside the database."""

from __future__ import annotations

import json
import stat

import pytest
from django.conf import settings

from reviewdesk.audit import verification
from reviewdesk.audit.anchors import TAIL_BYTES, anchors_read, newest_anchor
from reviewdesk.audit.models import AuditEvent
from reviewdesk.audit.services import audit_record
from reviewdesk.audit.tasks import anchor
from reviewdesk.audit.verification import audit_check
from reviewdesk.celery import app

pytestmark = pytest.mark.django_db


def record(n: int) -> list[AuditEvent]:
    return [audit_record(actor=None, action="test.step", subject_type="run", subject_id=i) for i in range(n)]


def anchor_lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def anchor_lines_skipping_blanks(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_beat_runs_the_anchor_task_on_its_schedule():
    entry = settings.CELERY_BEAT_SCHEDULE["audit-anchor"]
    assert entry == {"task": "audit.anchor", "schedule": float(settings.DESK_AUDIT_ANCHOR_SECONDS)}
    assert "audit.anchor" in app.tasks


def test_the_anchor_names_the_head_and_an_unchanged_head_is_not_anchored_twice(anchor_file):
    rows = record(3)
    told = anchor()
    anchor()
    (line,) = anchor_lines(anchor_file)
    # The task reads only the newest anchor, so it counts rows, not anchors.
    assert told == f"audit trail intact: 3 rows; last anchor: row {rows[2].pk} at {line['at']}"
    assert (line["last_id"], line["hash"], line["count"]) == (rows[2].pk, rows[2].hash, 3)
    assert line["key_id"].startswith("ed25519:") and line["signature"]
    assert stat.S_IMODE(anchor_file.stat().st_mode) == 0o600
    record(1)
    anchor()
    assert [line["count"] for line in anchor_lines(anchor_file)] == [3, 4]


def test_a_chain_broken_since_the_last_anchor_is_not_anchored(anchor_file):
    rows = record(2)
    anchor()
    more = record(2)
    AuditEvent.objects.filter(pk=more[0].pk).update(data={"forged": True})
    assert "BROKEN at row" in anchor()
    assert [line["last_id"] for line in anchor_lines(anchor_file)] == [rows[1].pk]


def test_an_anchor_line_with_a_bad_signature_fails_verification(anchor_file):
    record(2)
    anchor()
    line = anchor_lines(anchor_file)[0]
    anchor_file.write_text(json.dumps({**line, "count": 1}) + "\n")
    report = audit_check()
    assert (report.intact, report.problem) == (False, "anchor file line 1: bad signature")


def test_an_edited_anchored_row_stops_the_next_anchor(anchor_file):
    rows = record(2)
    anchor()
    record(1)
    AuditEvent.objects.filter(pk=rows[1].pk).update(data={"forged": True}, hash="f" * 64)
    assert f"BROKEN at row {rows[1].pk}" in anchor()
    assert len(anchor_lines(anchor_file)) == 1


def test_the_anchor_task_reads_only_the_newest_anchor_so_a_bad_line_before_it_is_left_to_the_full_check(
    anchor_file,
):
    for _ in range(3):
        record(1)
        anchor()
    lines = anchor_file.read_text().splitlines()
    anchor_file.write_text(
        "\n".join([lines[0], lines[1].replace('"count": 2', '"count": 9'), lines[2]]) + "\n"
    )
    record(1)

    assert anchor().startswith("audit trail intact: 4 rows")

    assert [line["count"] for line in anchor_lines(anchor_file)] == [1, 9, 3, 4]
    report = audit_check()
    assert (report.intact, report.problem) == (False, "anchor file line 2: bad signature")


def test_a_bad_newest_anchor_line_stops_the_next_anchor(anchor_file):
    record(2)
    anchor()
    line = anchor_lines(anchor_file)[0]
    anchor_file.write_text(json.dumps({**line, "count": 1}) + "\n")
    record(1)

    assert anchor() == "audit trail BROKEN at the anchors: anchor file last line: bad signature"
    assert len(anchor_lines(anchor_file)) == 1


def test_blank_lines_at_the_end_are_skipped_and_an_empty_file_holds_no_anchor(anchor_file):
    anchor_file.write_text("\n")
    rows = record(2)
    assert anchor().startswith("audit trail intact: 2 rows")
    with anchor_file.open("a") as handle:
        handle.write("\n  \n")
    record(1)

    assert anchor().startswith("audit trail intact: 3 rows")

    assert [line["last_id"] for line in anchor_lines_skipping_blanks(anchor_file)] == [
        rows[1].pk,
        rows[1].pk + 1,
    ]


def test_a_last_line_longer_than_the_read_tail_is_no_anchor_even_when_it_ends_like_one(anchor_file):
    """The newest anchor is read from the file's last TAIL_BYTES: a line that began before them
    is not taken for its end, however well that end parses."""
    record(2)
    anchor()
    line = anchor_file.read_text().rstrip("\n")
    padded = "garbage" + " " * (TAIL_BYTES - len(line)) + line
    anchor_file.write_text(padded + "\n")
    record(1)

    assert anchor() == (
        f"audit trail BROKEN at the anchors: anchor file last line: not an anchor (longer than {TAIL_BYTES} bytes)"
    )


def test_an_anchored_row_edited_but_left_with_its_hash_stops_the_next_anchor(anchor_file):
    """The anchored hash still matches; the row's own fields no longer give it."""
    rows = record(2)
    anchor()
    record(1)
    AuditEvent.objects.filter(pk=rows[1].pk).update(data={"forged": True})

    assert f"BROKEN at row {rows[1].pk}: its hash does not match its contents" in anchor()
    assert len(anchor_lines(anchor_file)) == 1


def test_a_line_still_being_appended_is_not_read_as_the_newest_anchor(anchor_file):
    """Beat appends a line with one write, which a reader may catch half done: the text after
    the last newline is not a line yet, for the page's tail read and the full check alike."""
    rows = record(2)
    anchor()
    whole = anchor_file.read_text()
    with anchor_file.open("a") as handle:
        handle.write(whole[: len(whole) // 2])  # half of the next line, no newline yet

    assert newest_anchor().last_id == rows[1].pk
    assert [a.last_id for a in anchors_read()] == [rows[1].pk]


def test_a_line_a_crash_cut_short_is_closed_by_the_next_anchor_and_then_reported(anchor_file):
    """The next append starts on a line of its own, so the cut line is whole, and bad."""
    record(2)
    anchor()
    cut = anchor_file.read_text()[:40]
    with anchor_file.open("a") as handle:
        handle.write(cut)
    rows = record(1)

    assert anchor().startswith("audit trail intact: 3 rows")

    assert anchor_file.read_text().splitlines()[1] == cut
    assert newest_anchor().last_id == rows[0].pk
    assert audit_check().problem == "anchor file line 2: not an anchor"


def test_the_newest_anchor_is_found_past_more_blank_lines_than_the_tail_holds(anchor_file):
    rows = record(2)
    anchor()
    with anchor_file.open("a") as handle:
        handle.write("\n" * (3 * TAIL_BYTES))

    assert newest_anchor().last_id == rows[1].pk


def test_a_number_too_large_for_an_integer_is_no_anchor(anchor_file):
    record(1)
    anchor()
    line = anchor_file.read_text().rstrip("\n").replace('"count": 1', '"count": 1e400')
    anchor_file.write_text(line + "\n")

    assert anchor() == "audit trail BROKEN at the anchors: anchor file last line: not an anchor"


def test_an_anchor_signs_only_the_head_its_walk_reached(anchor_file, monkeypatch):
    """The head is read, then the rows up to it walked: should the walk not end on that row as
    it was read (deleted, or put back, meanwhile), nothing is anchored."""
    rows = record(3)
    monkeypatch.setattr(verification, "chain_head", lambda: (rows[2].pk, "f" * 64))

    assert anchor() == (
        f"audit trail BROKEN at row {rows[2].pk}: the chain's head (row {rows[2].pk}) was not the last row walked"
    )
    assert not anchor_file.exists() or anchor_file.read_text() == ""


def test_rows_committed_after_the_head_was_read_wait_for_the_next_anchor(anchor_file, monkeypatch):
    """The walk stops at the head it read: the anchor names that row, with the count up to it."""
    rows = record(3)
    monkeypatch.setattr(verification, "chain_head", lambda: (rows[1].pk, rows[1].hash))

    assert anchor().startswith("audit trail intact: 2 rows")

    (line,) = anchor_lines(anchor_file)
    assert (line["last_id"], line["hash"], line["count"]) == (rows[1].pk, rows[1].hash, 2)
