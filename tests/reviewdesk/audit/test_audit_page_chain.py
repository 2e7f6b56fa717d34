"""The audit page's line on the hash chain, as the admin reads it.

On each load the page checks only what is new: the newest anchor (its line's signature), its
row, and the rows after it. For the rest it shows beat's last sweep (`audit.sweep`, a window of
rows round the chain) and last full check (`audit.check`), as recorded, signed, outside the
database, with their times; it never calls the whole chain intact on less. An attacker edits
the database here, as in test_verify_audit.py.
"""

from __future__ import annotations

import html
import json
import re
from datetime import datetime, timedelta

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.test import Client
from django.urls import reverse

from agents.decisions import key_id_for, sign_payload
from reviewdesk.audit import anchors, verification
from reviewdesk.audit.chain import plain_hash, row_fields
from reviewdesk.audit.check_record import check_record_read
from reviewdesk.audit.models import AuditEvent
from reviewdesk.audit.services import audit_record
from reviewdesk.audit.sweep import sweep_read
from reviewdesk.audit.tasks import anchor, check, sweep
from reviewdesk.desk import chain_status
from tests.reviewdesk.audit.test_verify_audit import legacy_rows

pytestmark = pytest.mark.django_db

EDITED = "its hash does not match its contents (edited, or recomputed without the key)"
RUN_THE_FULL_CHECK = (
    "run manage.py verify_audit --record where beat's worker runs, or wait for beat's audit.check"
)


@pytest.fixture
def admin(personas) -> Client:
    client = Client()
    client.force_login(personas.admin)
    return client


def record(n: int) -> list[AuditEvent]:
    return [audit_record(actor=None, action="test.step", subject_type="run", subject_id=i) for i in range(n)]


def chain_line(client: Client) -> tuple[str, str]:
    """(the status line's flash class, its text) on the audit page."""
    page = client.get(reverse("audit")).content.decode()
    kind, text = re.search(r'<p class="flash (\w+)" id="chain-status">(.*?)</p>', page, re.S).groups()
    return kind, html.unescape(re.sub(r"<[^>]+>", "", text))  # its clauses are set a line each


def shown(moment: datetime | str) -> str:
    """A time as the page shows it."""
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def newest_line(anchor_file) -> dict:
    return json.loads(anchor_file.read_text().splitlines()[-1])


def since_anchor(anchor_file, walked: str) -> str:
    line = newest_line(anchor_file)
    return f"the {walked} since the last anchor (row {line['last_id']} at {shown(line['at'])})"


def full_check_at() -> str:
    return shown(check_record_read().at)


def swept(first: AuditEvent, last: AuditEvent) -> str:
    """The line's words on the last sweep, which walked `first` to `last` and ended a lap there."""
    record = sweep_read()
    return (
        f"rows {first.pk}\N{EN DASH}{last.pk} swept at {shown(record.at)} "
        f"(every row to row {last.pk} swept since {shown(record.lap_done)})"
    )


NO_SWEEP = "no sweep of the older rows recorded yet: beat's audit.sweep runs every minute"


def test_the_admin_reads_what_was_checked_now_and_when_the_whole_chain_was_checked_in_full(
    admin, anchor_file
):
    rows = record(3)
    anchor()
    check()
    sweep()
    record(2)

    assert chain_line(admin) == (
        "success",
        f"Hash chain intact: {since_anchor(anchor_file, '2 rows')} checked now; {swept(rows[0], rows[2])}; "
        f"the whole chain (3 rows) checked in full at {full_check_at()}.",
    )


def test_with_no_anchor_yet_the_page_walks_every_row_and_says_so(admin):
    record(3)

    assert chain_line(admin) == ("success", "Hash chain intact: all 3 rows (no anchor yet) checked now.")


def test_a_row_edited_after_the_newest_anchor_shows_broken_at_that_row_now(admin):
    record(3)
    anchor()
    check()
    victim = record(2)[0]
    AuditEvent.objects.filter(pk=victim.pk).update(actor_name="mallory")

    assert chain_line(admin) == ("error", f"Hash chain broken at row {victim.pk}: {EDITED} (checked now).")


def test_a_row_edited_before_the_newest_anchor_shows_with_the_next_sweep_and_its_time(admin, anchor_file):
    """Until the next sweep the page vouches for the older rows only as the last sweep and the
    last full check saw them, with their times; after it, the row is named broken, with the
    sweep's time, and with the full check's too once that has run."""
    rows = record(4)
    anchor()
    check()
    seen_at = full_check_at()
    sweep()
    was_swept = swept(rows[0], rows[3])
    record(1)
    anchor()
    record(1)
    AuditEvent.objects.filter(pk=rows[1].pk).update(actor_name="mallory")

    assert chain_line(admin) == (
        "success",
        f"Hash chain intact: {since_anchor(anchor_file, '1 row')} checked now; {was_swept}; "
        f"the whole chain (4 rows) checked in full at {seen_at}.",
    )

    sweep()

    swept_at = shown(sweep_read().at)
    assert chain_line(admin) == (
        "error",
        f"Hash chain broken at row {rows[1].pk}: {EDITED} (the sweep at {swept_at}); "
        f"{since_anchor(anchor_file, '1 row')} is intact, checked now.",
    )

    check()

    assert chain_line(admin) == (
        "error",
        f"Hash chain broken at row {rows[1].pk}: {EDITED} (the full check at {full_check_at()}); "
        f"Hash chain broken at row {rows[1].pk}: {EDITED} (the sweep at {swept_at}); "
        f"{since_anchor(anchor_file, '1 row')} is intact, checked now.",
    )


@pytest.mark.parametrize("change", ["deleted", "hash changed", "edited, hash left"])
def test_the_newest_anchored_row_deleted_or_changed_is_broken_now(admin, change):
    rows = record(3)
    anchor()
    check()
    record(1)
    anchored = AuditEvent.objects.filter(pk=rows[2].pk)
    if change == "deleted":
        anchored.delete()
    elif change == "hash changed":
        anchored.update(hash="f" * 64)
    else:
        anchored.update(actor_name="mallory")

    kind, text = chain_line(admin)

    assert kind == "error"
    assert text.startswith(f"Hash chain broken at row {rows[2].pk}: ")
    assert text.endswith(
        f"{EDITED} (checked now)." if change == "edited, hash left" else "gone or changed (checked now)."
    )


def test_a_bad_newest_anchor_line_is_broken_now(admin, anchor_file):
    record(2)
    anchor()
    check()
    line = newest_line(anchor_file)
    anchor_file.write_text(json.dumps({**line, "count": 1}) + "\n")

    assert chain_line(admin) == (
        "error",
        "Hash chain broken: anchor file last line: bad signature (checked now).",
    )


def signed_by_a_stranger(check_file) -> None:
    entry = json.loads(check_file.read_text())
    entry.pop("signature")
    stranger = Ed25519PrivateKey.generate()
    payload = {**entry, "key_id": key_id_for(stranger.public_key())}
    check_file.write_text(json.dumps({**payload, "signature": sign_payload(stranger, payload)}))


@pytest.mark.parametrize("record_state", ["missing", "bad signature", "unknown key", "not a record"])
def test_without_a_valid_full_check_the_whole_chain_is_not_called_intact(
    admin, anchor_file, check_file, record_state
):
    rows = record(2)
    anchor()
    if record_state != "missing":
        AuditEvent.objects.filter(pk=rows[0].pk).update(actor_name="mallory")
        check()  # it finds the edit; the file is then made to say otherwise
        entry = json.loads(check_file.read_text())
        if record_state == "bad signature":
            check_file.write_text(json.dumps({**entry, "intact": True, "first_bad": None, "problem": ""}))
        elif record_state == "unknown key":
            check_file.write_text(json.dumps({**entry, "intact": True, "first_bad": None, "problem": ""}))
            signed_by_a_stranger(check_file)
        else:
            check_file.write_text('{"intact": true}')
    record(1)

    kind, text = chain_line(admin)

    why = {
        "missing": "no full check recorded yet",
        "bad signature": "the record of the last full check is not valid (bad signature)",
        "unknown key": "the record of the last full check is not valid (signed by unknown key ed25519:",
        "not a record": "the record of the last full check is not valid (not a record of a full check)",
    }[record_state]
    assert kind == "warning"
    assert text.startswith(
        f"Hash chain not yet checked in full: {since_anchor(anchor_file, '1 row')} is intact, checked now; "
        f"{NO_SWEEP}; {why}"
    )
    assert text.endswith(f": {RUN_THE_FULL_CHECK}.")


def test_a_full_check_long_overdue_is_no_longer_taken_for_the_whole_chain(admin, anchor_file, settings):
    """Beat's full check stopped (two of its intervals gone by): the line turns amber and says
    since when, where a green "intact" would vouch for rows nobody has checked since."""
    rows = record(3)
    anchor()
    check()
    settings.DESK_AUDIT_SWEEP_SECONDS = 3 * 3600  # the sweep is not overdue at any time below
    sweep()
    record(1)
    seen_at = full_check_at()
    settings.DESK_AUDIT_CHECK_SECONDS = 3600
    when_checked = check_record_read().at

    assert chain_line(admin)[0] == "success"
    assert describe_at(when_checked + timedelta(hours=1, minutes=59))[0] == "success"

    kind, text = describe_at(when_checked + timedelta(hours=2, minutes=1))

    assert kind == "warning"
    assert text == (
        f"Hash chain not checked in full since {seen_at} (3 rows intact then; beat's audit.check should "
        f"run every hour): {since_anchor(anchor_file, '1 row')} is intact, checked now; "
        f"{swept(rows[0], rows[2])}; {RUN_THE_FULL_CHECK}."
    )


def describe_at(now: datetime) -> tuple[str, str]:
    """The status line as the page would say it at `now`."""
    status = chain_status.describe(
        verification.audit_check_recent(), check_record_read(), "", sweep=sweep_read(), now=now
    )
    return status.kind, status.text


def test_the_page_checks_the_newest_anchor_line_and_hashes_only_the_rows_from_its_row_on(admin, monkeypatch):
    """Five anchors over 30 rows, three rows since: the page verifies one anchor line and
    hashes four rows (the anchored one and the three after it), where the full check does all."""
    for _ in range(5):
        rows = record(6)
        anchor()
    check()
    sweep()
    newer = record(3)
    hashed, verified = [], []
    row_hash, signature_valid = verification.row_hash, anchors.signature_valid
    monkeypatch.setattr(
        verification, "row_hash", lambda row, *, key: hashed.append(row.pk) or row_hash(row, key=key)
    )
    monkeypatch.setattr(
        anchors, "signature_valid", lambda *args: verified.append(1) or signature_valid(*args)
    )

    kind, _text = chain_line(admin)

    assert kind == "success"
    assert hashed == [rows[-1].pk, *(row.pk for row in newer)]
    assert len(verified) == 1
    hashed.clear()
    verified.clear()
    assert verification.audit_check().intact
    assert (len(hashed), len(verified)) == (33, 5)


UNHASHABLE = {"n": 2**53 + 1}  # past what RFC 8785's numbers hold: the canonical JSON refuses it


def test_a_row_no_hash_can_cover_is_named_broken_not_a_crash(admin, anchor_file):
    """An edit the canonical JSON refuses: before the newest anchor the full check names the row
    (its record red), after it the page and the anchor task do, and nothing raises."""
    rows = record(3)
    anchor()
    record(1)
    anchor()
    AuditEvent.objects.filter(pk=rows[0].pk).update(data=UNHASHABLE)

    check()

    kind, text = chain_line(admin)
    assert kind == "error"
    assert text.startswith(f"Hash chain broken at row {rows[0].pk}: its contents cannot be hashed (")
    after = record(1)[0]
    AuditEvent.objects.filter(pk=after.pk).update(data=UNHASHABLE)
    kind, text = chain_line(admin)
    assert (kind, text.split(" (")[0]) == (
        "error",
        f"Hash chain broken at row {after.pk}: its contents cannot be hashed",
    )
    assert f"BROKEN at row {after.pk}: its contents cannot be hashed" in anchor()


def test_a_record_dated_in_the_future_is_not_taken_for_a_full_check(admin, anchor_file, settings):
    """A worker whose clock runs ahead signs a time still to come: believed, it would keep the
    line green that much longer past it."""
    record(2)
    anchor()
    check()
    settings.DESK_AUDIT_SWEEP_SECONDS = 3600  # the sweep is not overdue at any time below
    sweep()
    record(1)
    later = check_record_read().at + timedelta(minutes=10)

    kind, text = describe_at(later - timedelta(minutes=20))

    assert kind == "warning"
    assert text.startswith(
        f"Hash chain not yet checked in full: {since_anchor(anchor_file, '1 row')} is intact, checked now; "
        f"the record of the last sweep is not valid (it is dated {shown(sweep_read().at)}, in the future): "
        "wait for beat's audit.sweep; "
        f"the record of the last full check is not valid (it is dated {full_check_at()}, in the future)"
    )
    assert describe_at(later)[0] == "success"


def test_with_no_anchor_yet_a_record_that_does_not_verify_is_still_flagged(admin, check_file):
    record(2)
    check_file.write_text('{"intact": true}')

    assert chain_line(admin) == (
        "warning",
        "Hash chain intact: all 2 rows (no anchor yet) checked now; but the record of the last full "
        f"check is not valid (not a record of a full check): {RUN_THE_FULL_CHECK}.",
    )


def test_with_no_anchor_yet_an_old_record_does_not_turn_the_line_amber(admin, settings):
    """Every row was walked on this load: the record's age takes nothing from that."""
    record(2)
    check()

    later = check_record_read().at + timedelta(seconds=3 * settings.DESK_AUDIT_CHECK_SECONDS)

    assert describe_at(later)[0] == "success"


def test_broken_now_and_at_the_last_full_check_says_both(admin):
    rows = record(3)
    anchor()
    AuditEvent.objects.filter(pk=rows[0].pk).update(actor_name="mallory")
    check()
    later = record(1)[0]
    AuditEvent.objects.filter(pk=later.pk).update(actor_name="mallory")

    assert chain_line(admin) == (
        "error",
        f"Hash chain broken at row {later.pk}: {EDITED} (checked now). Hash chain broken at row "
        f"{rows[0].pk}: {EDITED} (the full check at {full_check_at()}).",
    )


def test_no_row_since_the_newest_anchor_is_said_as_such(admin, anchor_file):
    rows = record(2)
    anchor()
    check()
    sweep()
    line = newest_line(anchor_file)

    assert chain_line(admin)[1].startswith(
        f"Hash chain intact: the last anchor (row {line['last_id']} at {shown(line['at'])}), with no row "
        f"since, checked now; {swept(rows[0], rows[1])}; the whole chain (2 rows) checked in full at"
    )


@pytest.mark.parametrize("unreadable", ["not UTF-8", "a directory"])
def test_a_record_that_cannot_be_read_is_flagged_not_a_server_error(admin, check_file, unreadable):
    record(2)
    anchor()
    if unreadable == "a directory":
        check_file.mkdir()
    else:
        check_file.write_bytes(b"\xff\xfe{}")

    kind, text = chain_line(admin)

    assert kind == "warning"
    assert "the record of the last full check is not valid (cannot be read (" in text


def test_a_legacy_anchored_row_rewritten_with_its_unkeyed_hash_recomputed_is_broken_now(
    admin, anchor_file, settings, tmp_path
):
    """Unkeyed rows' hashes anyone can compute: a row anchored before the chain was keyed, edited
    and given the plain hash of its new contents, still differs from the hash its anchor signed."""
    settings.DESK_AUDIT_PLAIN_UNTIL_FILE = tmp_path / "audit_plain_until"  # a fresh install's: none yet
    legacy_rows(2)
    anchor()
    check()
    record(1)
    anchored = AuditEvent.objects.order_by("id")[1]
    AuditEvent.objects.filter(pk=anchored.pk).update(actor_name="mallory")
    anchored.refresh_from_db()
    AuditEvent.objects.filter(pk=anchored.pk).update(
        hash=plain_hash(anchored.prev_hash, row_fields(anchored))
    )

    assert chain_line(admin) == (
        "error",
        f"Hash chain broken at row {anchored.pk}: the row anchored at {newest_line(anchor_file)['at']} is gone "
        "or changed (checked now).",
    )
