"""Beat's anchor task: the chain head, signed, appended outside the database."""

from __future__ import annotations

import json
import stat

import pytest
from django.conf import settings

from reviewdesk.audit.models import AuditEvent
from reviewdesk.audit.services import audit_check, audit_record
from reviewdesk.audit.tasks import anchor
from reviewdesk.celery import app

pytestmark = pytest.mark.django_db


def record(n: int) -> list[AuditEvent]:
    return [audit_record(actor=None, action="test.step", subject_type="run", subject_id=i) for i in range(n)]


def anchor_lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_beat_runs_the_anchor_task_on_its_schedule():
    entry = settings.CELERY_BEAT_SCHEDULE["audit-anchor"]
    assert entry == {"task": "audit.anchor", "schedule": float(settings.DESK_AUDIT_ANCHOR_SECONDS)}
    assert "audit.anchor" in app.tasks


def test_the_anchor_names_the_head_and_an_unchanged_head_is_not_anchored_twice(anchor_file):
    rows = record(3)
    assert anchor().startswith("audit trail intact: 3 rows, 1 anchors")
    anchor()
    (line,) = anchor_lines(anchor_file)
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
