from __future__ import annotations

import pytest

from reviewdesk.audit.models import AuditEvent
from reviewdesk.audit.services import audit_record, audit_verify

pytestmark = pytest.mark.django_db


def test_the_chain_verifies_and_detects_an_edited_row(personas):
    for n in range(3):
        audit_record(actor=personas.alice, action="test.step", subject_type="run", subject_id=n)
    assert audit_verify() == (True, None)
    middle = AuditEvent.objects.order_by("id")[1]
    AuditEvent.objects.filter(pk=middle.pk).update(data={"forged": True})
    assert audit_verify() == (False, middle.pk)


def test_a_deleted_row_breaks_the_chain(personas):
    rows = [audit_record(actor=None, action="test.step", subject_type="run", subject_id=n) for n in range(3)]
    AuditEvent.objects.filter(pk=rows[1].pk).delete()
    assert audit_verify() == (False, rows[2].pk)
