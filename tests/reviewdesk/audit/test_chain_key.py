"""The keyed hash: it covers the row id, and its key comes from outside the database."""

from __future__ import annotations

import stat

import pytest

from reviewdesk.audit.keys import AuditKeyMissing, audit_key
from reviewdesk.audit.models import AuditEvent
from reviewdesk.audit.services import audit_check, audit_record

pytestmark = pytest.mark.django_db


def test_a_keyed_row_moved_to_another_id_fails():
    """Ids are not contiguous (a rolled-back write leaves a gap): a row moved into one must not verify."""
    first = audit_record(actor=None, action="test.step", subject_type="run", subject_id=1)
    AuditEvent.objects.filter(pk=first.pk).update(id=first.pk + 10)
    report = audit_check()
    assert (report.intact, report.first_bad) == (False, first.pk + 10)


def test_the_key_file_is_created_0600_and_the_environment_overrides_it(settings, tmp_path):
    settings.DESK_AUDIT_KEY_FILE = tmp_path / "audit_key"
    key = audit_key()
    assert stat.S_IMODE(settings.DESK_AUDIT_KEY_FILE.stat().st_mode) == 0o600
    assert audit_key(create=False) == key
    settings.DESK_AUDIT_KEY = "from-the-environment"
    assert audit_key() == b"from-the-environment"


def test_a_verifier_without_the_key_says_so_instead_of_inventing_one(settings, tmp_path):
    audit_record(actor=None, action="test.step", subject_type="run", subject_id=1)
    settings.DESK_AUDIT_KEY_FILE = tmp_path / "elsewhere"
    with pytest.raises(AuditKeyMissing):
        audit_key(create=False)
    report = audit_check()
    assert not report.intact and "no audit key" in report.problem
    assert not settings.DESK_AUDIT_KEY_FILE.exists()
