"""Beat's sweep: a window of rows at a time, round the whole chain, so that an edit to an older
row shows on the audit page within one lap (ceil(rows / DESK_AUDIT_SWEEP_ROWS) sweeps, one every
DESK_AUDIT_SWEEP_SECONDS), not only at the next hourly full check.

The attacker writes the database with plain SQL, as in test_verify_audit.py; the sweep's
position and findings are kept outside it, signed (reviewdesk/audit/sweep.py).
"""

from __future__ import annotations

import html
import json
import math
import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from reviewdesk.audit.chain import keyed_hash, plain_hash, row_fields
from reviewdesk.audit.check_record import check_record_read
from reviewdesk.audit.keys import audit_key
from reviewdesk.audit.models import AuditEvent, ChainVersion
from reviewdesk.audit.services import audit_record
from reviewdesk.audit.sweep import audit_sweep, sweep_read
from reviewdesk.audit.tasks import anchor, check, sweep
from reviewdesk.audit.verification import audit_check_recent
from reviewdesk.celery import app
from reviewdesk.desk.chain_status import chain_status, describe

pytestmark = pytest.mark.django_db

EDITED = "its hash does not match its contents (edited, or recomputed without the key)"
TABLE = AuditEvent._meta.db_table


@pytest.fixture(autouse=True)
def own_legacy_boundary(settings, tmp_path):
    """Each test's chain starts fresh, so its legacy boundary (a file beside the key) does too."""
    settings.DESK_AUDIT_PLAIN_UNTIL_FILE = tmp_path / "audit_plain_until"


@pytest.fixture
def admin(personas) -> Client:
    client = Client()
    client.force_login(personas.admin)
    return client


def record(n: int) -> list[AuditEvent]:
    return [audit_record(actor=None, action="test.step", subject_type="run", subject_id=i) for i in range(n)]


def long_chain(n: int) -> list[int]:
    """`n` keyed rows as `audit_record` writes them (one written by it, to record the legacy
    boundary as a real deployment does; the rest hashed here and inserted in bulk, for speed),
    and every id of the chain, oldest first."""
    first = audit_record(actor=None, action="test.step", subject_type="run", subject_id=0)
    key, prev, now = audit_key(), first.hash, timezone.now()
    rows = []
    for i in range(first.pk + 1, first.pk + n):
        row = AuditEvent(
            id=i, at=now, actor_name="system", action="test.step", subject_type="run",
            subject_id=str(i), data={"n": i}, prev_hash=prev, version=ChainVersion.KEYED,
        )  # fmt: skip
        row.hash = prev = keyed_hash(key, row)
        rows.append(row)
    AuditEvent.objects.bulk_create(rows, batch_size=2000)
    if connection.vendor == "postgresql":  # ids given here: the next audit_record takes the one after
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT setval(pg_get_serial_sequence('{TABLE}', 'id'), %s)", [rows[-1].id])
    return list(AuditEvent.objects.order_by("id").values_list("id", flat=True))


def edit_with_sql(row_id: int) -> None:
    """What a database writer does: one UPDATE, no key, the hash left as it was."""
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {TABLE} SET actor_name = 'mallory' WHERE id = %s", [row_id])


def chain_line(client: Client) -> tuple[str, str]:
    page = client.get(reverse("audit")).content.decode()
    kind, text = re.search(r'<p class="flash (\w+)" id="chain-status">(.*?)</p>', page, re.S).groups()
    return kind, html.unescape(re.sub(r"<[^>]+>", "", text))  # its clauses are set a line each


def lap(rows: int, window: int) -> int:
    """Sweeps in one lap round a chain of `rows` rows: the bound docs/audit.md states."""
    return math.ceil(rows / window)


def test_beat_runs_the_sweep_every_minute_and_a_worker_knows_the_task():
    entry = settings.CELERY_BEAT_SCHEDULE["audit-sweep"]
    assert entry == {"task": "audit.sweep", "schedule": float(settings.DESK_AUDIT_SWEEP_SECONDS)}
    assert (settings.DESK_AUDIT_SWEEP_SECONDS, settings.DESK_AUDIT_SWEEP_ROWS) == (60, 20_000)
    assert "audit.sweep" in app.tasks


def test_the_task_says_what_it_walked_and_records_it_signed_and_replaced_whole(sweep_file):
    rows = record(3)

    told = sweep()

    assert told == f"audit sweep: rows {rows[0].pk}-{rows[2].pk} intact; next after row 0"
    assert json.loads(sweep_file.read_text())["key_id"].startswith("ed25519:")
    assert [p.name for p in sweep_file.parent.iterdir() if p.name.startswith(".audit_sweep")] == []
    AuditEvent.objects.filter(pk=rows[1].pk).update(actor_name="mallory")
    assert sweep() == f"audit sweep: rows {rows[0].pk}-{rows[1].pk}: BROKEN at row {rows[1].pk}: {EDITED}"


def test_an_old_row_edited_with_sql_is_broken_on_the_page_within_one_lap_at_the_default_settings(
    admin, settings
):
    """The attack: a chain longer than the page's tail and than one sweep's window; beat has
    anchored, checked in full and swept it, and the page is green. A row the sweep has just
    walked past is edited with a plain UPDATE (the worst case: a whole lap until it comes round
    again). The page stays green until the sweep reaches it, which is within one lap: 3 sweeps
    (3 minutes) for 40,500 rows at the default 20,000 rows a minute, not the hour until the
    next full check."""
    window = settings.DESK_AUDIT_SWEEP_ROWS
    assert (window, settings.DESK_AUDIT_SWEEP_SECONDS, settings.DESK_AUDIT_CHECK_SECONDS) == (
        20_000,
        60,
        3600,
    )
    ids = long_chain(2 * window + 500)
    assert "intact" in anchor()
    check()
    record(2)  # the page's tail: rows since the newest anchor
    while sweep_read() is None or sweep_read().lap_done is None:
        sweep()
    sweep()  # the next lap's first window: rows 1-20,000
    victim = ids[window // 2]
    assert sweep_read().first <= victim <= sweep_read().last
    edit_with_sql(victim)
    assert chain_line(admin)[0] == "success"  # the edit is behind the sweep, before the full check

    sweeps = 0
    while chain_line(admin)[0] == "success":
        sweep()
        sweeps += 1
        assert sweeps <= lap(len(ids) + 2, window), "not found within one lap"

    kind, text = chain_line(admin)
    assert kind == "error"
    assert text.startswith(
        f"Hash chain broken at row {victim}: {EDITED} (the sweep at "
        f"{sweep_read().at.strftime('%Y-%m-%d %H:%M:%S UTC')}); "
    )
    assert sweeps == lap(len(ids) + 2, window) == 3


@pytest.mark.parametrize("window", [1, 4, 7])
def test_an_edit_anywhere_is_found_within_one_lap_wherever_the_sweep_stands(settings, window):
    """Every row, edited right behind the sweep (or anywhere else), is named within
    ceil(rows / window) sweeps, over the chain's last rows too (the tail past the newest anchor)."""
    settings.DESK_AUDIT_SWEEP_ROWS = window
    rows = record(11)
    anchor()
    for victim in rows:
        AuditEvent.objects.filter(pk=victim.pk).update(actor_name="mallory")
        for _ in range(lap(len(rows), window)):
            found = audit_sweep()
            if not found.intact:
                break
        assert (found.intact, found.first_bad, found.problem) == (False, victim.pk, EDITED)
        AuditEvent.objects.filter(pk=victim.pk).update(actor_name="system")  # put back


def test_a_deleted_old_row_is_found_by_the_sweep_even_at_the_start_of_a_window(settings):
    """The row the window would have begun with is gone: the row now first in the window is
    linked to the row before it in the table, not taken at its own word."""
    settings.DESK_AUDIT_SWEEP_ROWS = 3
    rows = record(9)
    anchor()
    assert audit_sweep().last == rows[2].pk
    AuditEvent.objects.filter(pk=rows[3].pk).delete()

    found = audit_sweep()

    assert (found.intact, found.first_bad) == (False, rows[4].pk)
    assert found.problem.startswith("it does not follow the row before it")


def test_a_window_that_begins_at_a_forged_unkeyed_row_still_knows_keyed_rows_came_before(settings):
    """The legacy boundary's file is lost and there is no anchor: only the rows before the window
    say that unkeyed rows can no longer be genuine. The attacker rewrites the chain's last rows
    under the old, unkeyed rule, links and all."""
    settings.DESK_AUDIT_SWEEP_ROWS = 3
    rows = record(6)
    Path(settings.DESK_AUDIT_PLAIN_UNTIL_FILE).unlink()
    prev = rows[2].hash
    for row in rows[3:]:
        row.refresh_from_db()
        row.prev_hash, row.version = prev, ChainVersion.PLAIN
        row.hash = prev = plain_hash(prev, row_fields(row))
        AuditEvent.objects.filter(pk=row.pk).update(
            prev_hash=row.prev_hash, version=row.version, hash=row.hash
        )

    assert audit_sweep().intact  # rows 1-3
    found = audit_sweep()

    assert (found.intact, found.first_bad) == (False, rows[3].pk)
    assert "unkeyed row after keyed rows" in found.problem


def test_the_sweep_stays_on_a_bad_row_until_it_verifies_again(settings):
    """Moving on would turn the record green a minute later, with the row still edited."""
    settings.DESK_AUDIT_SWEEP_ROWS = 2
    rows = record(6)
    anchor()
    AuditEvent.objects.filter(pk=rows[1].pk).update(actor_name="mallory")

    for _ in range(3):
        found = audit_sweep()
        assert (found.intact, found.first_bad) == (False, rows[1].pk)

    AuditEvent.objects.filter(pk=rows[1].pk).update(actor_name="system")
    found = audit_sweep()
    assert (found.intact, found.first, found.last) == (True, rows[1].pk, rows[2].pk)


def test_the_position_is_kept_outside_the_database_and_a_record_that_does_not_verify_starts_a_new_lap(
    settings, sweep_file
):
    """The next window begins where the signed record says; a record edited to skip rows (its
    signature no longer verifies) is not followed: the sweep starts again from the first row."""
    settings.DESK_AUDIT_SWEEP_ROWS = 2
    rows = record(6)
    assert (audit_sweep().first, audit_sweep().first) == (rows[0].pk, rows[2].pk)
    entry = json.loads(sweep_file.read_text())
    sweep_file.write_text(json.dumps({**entry, "after": rows[5].pk}))

    assert audit_sweep().first == rows[0].pk


def test_a_lap_ends_at_the_head_and_the_next_begins_at_the_first_row(settings):
    settings.DESK_AUDIT_SWEEP_ROWS = 4
    rows = record(6)
    first = audit_sweep()
    assert (first.first, first.last, first.lap_done) == (rows[0].pk, rows[3].pk, None)
    second = audit_sweep()
    assert (second.first, second.last, second.after) == (rows[4].pk, rows[5].pk, 0)
    assert (second.lap_done, second.lap_to) == (first.lap_began, rows[5].pk)
    third = audit_sweep()
    assert (third.first, third.lap_began) == (rows[0].pk, third.at)


def test_an_earlier_sweeps_record_does_not_replace_a_later_ones(settings, monkeypatch):
    """Two sweeps at once (a redelivered task): the one that began later keeps its word."""
    settings.DESK_AUDIT_SWEEP_ROWS = 2
    rows = record(4)
    later = audit_sweep()
    monkeypatch.setattr(timezone, "now", lambda: later.at - timedelta(seconds=5))

    audit_sweep()

    assert sweep_read() == later and sweep_read().last == rows[1].pk


def test_a_sweep_record_long_overdue_turns_the_line_amber(admin, settings):
    """Beat stopped sweeping: the older rows are no longer being walked, so the page does not
    vouch for them in green, and says when they were last swept."""
    rows = record(3)
    anchor()
    check()
    sweep()
    record(1)
    assert chain_line(admin)[0] == "success"
    swept_at = sweep_read().at

    later = swept_at + timedelta(seconds=2 * settings.DESK_AUDIT_SWEEP_SECONDS + 1)
    line = describe(audit_check_recent(), check_record_read(), "", sweep=sweep_read(), now=later)

    assert line.kind == "warning"
    assert line.text.startswith(f"Hash chain not swept since {swept_at.strftime('%Y-%m-%d %H:%M:%S UTC')}: ")
    assert f"rows {rows[0].pk}\N{EN DASH}{rows[2].pk} last swept at " in line.text


def test_with_no_sweep_recorded_yet_the_older_rows_are_not_called_intact(admin):
    """The full check alone vouches for the older rows only as of its hour: not green."""
    record(3)
    anchor()
    check()
    record(1)

    kind, text = chain_line(admin)

    assert kind == "warning"
    assert text.startswith("Hash chain not swept: ")
    assert "no sweep of the older rows recorded yet: beat's audit.sweep runs every minute" in text


def test_a_forged_sweep_record_is_not_believed(admin, sweep_file):
    """A record saying "intact" over a sweep that found an edit, its signature broken by the
    change: the page says the record is not valid, not green."""
    rows = record(3)
    anchor()
    check()
    AuditEvent.objects.filter(pk=rows[0].pk).update(actor_name="mallory")
    sweep()
    assert chain_line(admin)[0] == "error"
    entry = json.loads(sweep_file.read_text())
    sweep_file.write_text(json.dumps({**entry, "intact": True, "first_bad": None, "problem": ""}))

    kind, text = chain_line(admin)

    assert kind == "warning"
    assert "the record of the last sweep is not valid (bad signature)" in text


def test_the_page_says_what_the_sweep_walked_and_when_and_the_lap_it_completed(admin, settings):
    settings.DESK_AUDIT_SWEEP_ROWS = 2
    rows = record(5)
    anchor()
    check()
    for _ in range(3):
        sweep()  # rows 1-2, 3-4, 5: a lap
    lap_done = sweep_read().lap_done
    sweep()  # rows 1-2 again

    kind, text = chain_line(admin)

    swept_at = sweep_read().at.strftime("%Y-%m-%d %H:%M:%S UTC")
    assert kind == "success"
    assert (
        f"; rows {rows[0].pk}\N{EN DASH}{rows[1].pk} swept at {swept_at} (every row to row {rows[4].pk} swept since "
        f"{lap_done.strftime('%Y-%m-%d %H:%M:%S UTC')}); the whole chain (5 rows) checked in full at "
    ) in text
    assert chain_status().text == text


def test_the_bound_the_docs_state_holds_at_the_default_settings(settings):
    """docs/audit.md: every row is walked at least once every 10 minutes for a chain of up to
    200,000 rows, at 20,000 rows a sweep, a sweep a minute."""
    docs = (Path(__file__).resolve().parents[3] / "docs" / "audit.md").read_text()
    assert "at least once every 10 minutes for a chain of up to 200,000 rows" in docs
    sweeps = lap(200_000, settings.DESK_AUDIT_SWEEP_ROWS)
    assert sweeps * settings.DESK_AUDIT_SWEEP_SECONDS <= 10 * 60
