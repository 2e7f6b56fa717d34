"""Beat's full check of the chain, recorded outside the database, signed with the anchor key,
for the audit page to show; and `verify_audit --record`, which records it too."""

from __future__ import annotations

import dataclasses
import json
import stat
from datetime import timedelta

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.conf import settings
from django.core.management import CommandError, call_command
from django.utils import timezone

from agents.decisions import key_id_for, sign_payload
from reviewdesk.audit.check_record import CheckRecordInvalid, check_record_read, check_record_write
from reviewdesk.audit.keys import anchor_private_key
from reviewdesk.audit.models import AuditEvent
from reviewdesk.audit.services import audit_record
from reviewdesk.audit.tasks import check
from reviewdesk.audit.verification import audit_anchor
from reviewdesk.celery import app

pytestmark = pytest.mark.django_db


def record(n: int) -> list[AuditEvent]:
    return [audit_record(actor=None, action="test.step", subject_type="run", subject_id=i) for i in range(n)]


def test_beat_runs_the_full_check_on_its_schedule():
    entry = settings.CELERY_BEAT_SCHEDULE["audit-check"]
    assert entry == {"task": "audit.check", "schedule": float(settings.DESK_AUDIT_CHECK_SECONDS)}
    assert settings.DESK_AUDIT_CHECK_SECONDS == 3600
    assert "audit.check" in app.tasks


def test_beat_sends_the_full_check_as_it_starts(task_queue, redis_client):
    """Beat's start (its `beat_init` signal, as Celery sends it) puts one `audit.check` on the
    real broker's queue, for a worker to run then rather than an interval later."""
    from celery import signals

    signals.beat_init.send(sender=None)

    assert task_queue.length() == 1
    message = json.loads(redis_client.lindex(task_queue.name, 0))
    assert message["headers"]["task"] == "audit.check"


def test_the_full_check_records_what_it_found_signed_and_replaced_whole(check_file):
    rows = record(3)
    assert audit_anchor().intact
    record(2)
    before = timezone.now()

    told = check()

    found = check_record_read()
    assert told.startswith("audit trail intact: 5 rows, 1 anchors")
    assert (found.intact, found.first_bad, found.problem, found.rows, found.anchors) == (True, None, "", 5, 1)
    assert (found.last_anchor.last_id, found.last_anchor.hash) == (rows[2].pk, rows[2].hash)
    assert before - timedelta(seconds=1) <= found.at <= timezone.now()
    assert json.loads(check_file.read_text())["key_id"].startswith("ed25519:")
    assert stat.S_IMODE(check_file.stat().st_mode) == 0o600
    assert [p.name for p in check_file.parent.iterdir() if p.name.startswith(".")] == []  # no temp left
    record(1)

    check()

    assert (check_record_read().rows, check_record_read().at > found.at) == (6, True)
    assert [p.name for p in check_file.parent.iterdir() if p.name.startswith(".")] == []


def test_a_record_keeps_the_mode_the_operator_gave_the_one_it_replaces(check_file):
    """0640, say, for a web tier in the worker's group: replaced hourly, the record keeps it."""
    record(1)
    check()
    check_file.chmod(0o640)

    check()

    assert stat.S_IMODE(check_file.stat().st_mode) == 0o640


def test_a_record_from_a_check_that_began_later_is_not_replaced_by_an_earlier_one(check_file):
    """Two checks at once (beat's start and its schedule): the later one's word stands."""
    record(1)
    check()
    later = check_record_read()
    earlier = dataclasses.replace(later, at=later.at - timedelta(minutes=1), rows=0)

    assert check_record_write(earlier) is False

    assert check_record_read() == later


def test_a_broken_chain_is_recorded_with_its_first_bad_row_and_the_problem():
    rows = record(3)
    AuditEvent.objects.filter(pk=rows[1].pk).update(data={"forged": True})

    assert "BROKEN at row" in check()

    found = check_record_read()
    assert (found.intact, found.first_bad) == (False, rows[1].pk)
    assert "does not match its contents" in found.problem


def test_no_record_until_a_full_check_has_run(check_file):
    assert not check_file.exists()
    assert check_record_read() is None


def resigned(check_file, key: Ed25519PrivateKey) -> None:
    """The record signed again with `key`, named by its key id."""
    entry = json.loads(check_file.read_text())
    entry.pop("signature")
    payload = {**entry, "key_id": key_id_for(key.public_key())}
    check_file.write_text(json.dumps({**payload, "signature": sign_payload(key, payload)}))


def test_a_record_changed_after_signing_is_refused_for_its_signature(check_file):
    rows = record(2)
    AuditEvent.objects.filter(pk=rows[0].pk).update(data={"forged": True})
    check()
    entry = json.loads(check_file.read_text())
    check_file.write_text(json.dumps({**entry, "intact": True, "first_bad": None, "problem": ""}))

    with pytest.raises(CheckRecordInvalid, match="bad signature"):
        check_record_read()


def test_a_record_signed_by_a_key_not_among_the_anchor_keys_is_refused(check_file):
    record(2)
    check()
    stranger = Ed25519PrivateKey.generate()
    resigned(check_file, stranger)

    with pytest.raises(
        CheckRecordInvalid, match=f"signed by unknown key {key_id_for(stranger.public_key())}"
    ):
        check_record_read()


def test_an_anchor_line_is_no_record_even_when_signed_by_the_same_key(check_file):
    """A signed payload of another kind under the anchor key is not a record of a full check."""
    record(1)
    check()
    entry = json.loads(check_file.read_text())
    entry.pop("signature")
    key = anchor_private_key()
    payload = {**entry, "kind": "audit.anchor"}
    check_file.write_text(json.dumps({**payload, "signature": sign_payload(key, payload)}))

    with pytest.raises(CheckRecordInvalid, match=r"not a record of a full check \(kind 'audit.anchor'"):
        check_record_read()


@pytest.mark.parametrize("text", ["", "{}", "[1]", '{"intact": true}'])
def test_a_file_that_is_no_record_is_refused(check_file, text):
    check_file.write_text(text)

    with pytest.raises(CheckRecordInvalid, match="not a record of a full check"):
        check_record_read()


def test_verify_audit_records_its_result_only_when_asked(check_file, capsys):
    record(2)

    call_command("verify_audit")
    assert not check_file.exists()

    call_command("verify_audit", "--record")
    assert "audit trail intact: 2 rows, 0 anchors" in capsys.readouterr().out
    found = check_record_read()
    assert (found.intact, found.rows) == (True, 2)


def test_verify_audit_records_nothing_where_there_is_no_anchor_key(check_file, settings, tmp_path):
    """Run on a host without the anchor key (a web host), it refuses rather than make one: a key
    made there would sign records and anchors the page trusts."""
    record(1)
    settings.DESK_AUDIT_ANCHOR_KEY_FILE = tmp_path / "no_anchor_key.pem"

    with pytest.raises(
        CommandError, match=r"not recorded: no anchor key at .*run this where beat's worker runs"
    ):
        call_command("verify_audit", "--record")

    assert not settings.DESK_AUDIT_ANCHOR_KEY_FILE.exists()
    assert not check_file.exists()
