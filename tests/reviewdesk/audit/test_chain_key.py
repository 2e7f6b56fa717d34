"""The keyed hash: it covers the row id, and its key comes from outside the database."""

from __future__ import annotations

import stat

import pytest
from django.db import connection

from reviewdesk.audit.keys import AuditKeyMissing, audit_key, audit_key_problem
from reviewdesk.audit.models import AuditEvent
from reviewdesk.audit.services import audit_record
from reviewdesk.audit.verification import audit_check

pytestmark = pytest.mark.django_db


def test_a_keyed_row_moved_to_another_id_fails():
    """Ids are not contiguous (a rolled-back write leaves a gap): a row moved into one must not verify."""
    first = audit_record(actor=None, action="test.step", subject_type="run", subject_id=1)
    AuditEvent.objects.filter(pk=first.pk).update(id=first.pk + 10)
    report = audit_check()
    assert (report.intact, report.first_bad) == (False, first.pk + 10)


def test_a_keyed_row_whose_actor_id_was_edited_fails(personas):
    """The actor's name is kept beside the id (renames keep the name): an edit of the id alone,
    pinning the action on another user with the name left as it was, is caught by the hash."""
    row = audit_record(actor=personas.alice, action="test.step", subject_type="run", subject_id=1)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {AuditEvent._meta.db_table} SET actor_id = %s WHERE id = %s", [personas.bob.pk, row.pk]
        )
    assert AuditEvent.objects.get(pk=row.pk).actor_name == "alice"

    report = audit_check()

    assert (report.intact, report.first_bad) == (False, row.pk)
    assert report.problem.startswith("its hash does not match its contents")


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


@pytest.fixture
def production(settings, monkeypatch):
    """A production configuration (reviewdesk.lib.deployment.is_production_configuration):
    DEBUG off, an external Redis, and not a test process."""
    settings.DEBUG, settings.REDIS_URL = False, "redis://127.0.0.1:6379/9"
    monkeypatch.delenv("DESK_TESTING")


def test_a_production_writer_without_the_key_refuses_to_write_instead_of_making_its_own(
    settings, tmp_path, production
):
    """A key made on one writer host is that host's alone: its rows fail verification on every
    other host. In production the key is provided (DESK_AUDIT_KEY or DESK_AUDIT_KEY_FILE), or
    nothing is audited, and so nothing is done."""
    settings.DESK_AUDIT_KEY_FILE = tmp_path / "audit_key"
    before = AuditEvent.objects.count()
    with pytest.raises(AuditKeyMissing, match="production configuration") as refused:
        audit_record(actor=None, action="test.step", subject_type="run", subject_id=1)
    assert "DESK_AUDIT_KEY" in str(refused.value) and str(settings.DESK_AUDIT_KEY_FILE) in str(refused.value)
    assert not settings.DESK_AUDIT_KEY_FILE.exists()
    assert AuditEvent.objects.count() == before


def test_a_production_writer_with_the_key_provided_writes(settings, tmp_path, production):
    settings.DESK_AUDIT_KEY_FILE = tmp_path / "audit_key"
    settings.DESK_AUDIT_KEY_FILE.write_text("provided by the operator\n")
    assert audit_key() == b"provided by the operator"
    assert audit_record(actor=None, action="test.step", subject_type="run", subject_id=1) is not None
    settings.DESK_AUDIT_KEY_FILE = tmp_path / "absent"
    settings.DESK_AUDIT_KEY = "from-the-environment"
    assert audit_key() == b"from-the-environment"


def test_a_production_writer_whose_key_file_cannot_be_read_is_told_so_at_start(
    settings, tmp_path, production
):
    """The start-up check (audit_key_problem, asked by the web process, the workers and
    `manage.py check`) reads the key as a write would: a path it cannot read is a problem too."""
    settings.DESK_AUDIT_KEY_FILE = tmp_path / "a-directory"
    settings.DESK_AUDIT_KEY_FILE.mkdir()

    problem = audit_key_problem()

    assert problem is not None
    assert problem.startswith(
        f"cannot read the audit key {settings.DESK_AUDIT_KEY_FILE} (DESK_AUDIT_KEY_FILE)"
    )


def test_the_start_up_check_passes_with_the_key_provided_and_outside_production(
    settings, tmp_path, monkeypatch
):
    settings.DESK_AUDIT_KEY_FILE = tmp_path / "absent"
    assert audit_key_problem() is None  # a test process makes its own on first use
    settings.DEBUG, settings.REDIS_URL = False, "redis://127.0.0.1:6379/9"
    monkeypatch.delenv("DESK_TESTING")
    assert "no audit key in a production configuration" in (audit_key_problem() or "")
    settings.DESK_AUDIT_KEY = "from-the-environment"
    assert audit_key_problem() is None
