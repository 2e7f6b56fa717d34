"""A `decision.refused` row names the decision the gate refused, its request and its call, so
an admin can follow it from the audit page (the badge checks that decision's signature)."""

from __future__ import annotations

import base64

import pytest
from django.test import Client
from django.urls import reverse

from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.approvals.models import Decision
from reviewdesk.audit.models import AuditEvent
from reviewdesk.audit.verification import audit_verify
from reviewdesk.runs.execution import run_execute
from reviewdesk.runs.models import RunStatus

pytestmark = pytest.mark.django_db


def _refused_row(interrupted_run, personas, tamper) -> tuple[AuditEvent, Decision]:
    run, approval = interrupted_run()
    decision = approval_decide(
        approval_id=approval.id,
        reviewer=personas.alice,
        verdict="approve",
        checkpoint_id=str(approval.checkpoint_id),
    )
    tamper(decision)
    run_execute(run_id=run.id, worker="in-process")
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and run.error.startswith("decision refused"), run.error
    return AuditEvent.objects.get(action="decision.refused", subject_id=str(run.id)), decision


def _flip_signature(decision: Decision) -> None:
    raw = bytearray(base64.b64decode(decision.signature))
    raw[0] ^= 0xFF
    Decision.objects.filter(pk=decision.pk).update(signature=base64.b64encode(bytes(raw)).decode())


def _consume(decision: Decision) -> None:
    Decision.objects.filter(pk=decision.pk).update(consumed_at=decision.decided_at)


def _badge(admin, row: AuditEvent) -> str:
    client = Client()
    client.force_login(admin)
    page = client.get(reverse("audit"), {"action": "decision.refused"}).content.decode()
    return page.split(f'id="audit-{row.id}"', 1)[1].split("</tr>", 1)[0]


def test_a_refusal_names_its_decision_request_and_call(interrupted_run, personas):
    row, decision = _refused_row(interrupted_run, personas, _flip_signature)
    assert row.data["decision"] == str(decision.id)
    assert row.data["approval"] == str(decision.request_id)
    assert row.data["tool_call_id"] == decision.request.tool_call_id
    assert audit_verify() == (True, None)
    assert "✗ invalid" in _badge(personas.admin, row)


def test_a_refused_replay_names_a_decision_whose_signature_holds(interrupted_run, personas):
    """Refused for being used already, not for its signature: the badge says the signature is valid."""
    row, decision = _refused_row(interrupted_run, personas, _consume)
    assert row.data["decision"] == str(decision.id)
    assert "✓ signature valid · server-signed" in _badge(personas.admin, row)
