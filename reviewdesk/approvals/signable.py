"""The payload a reviewer's device key signs (issue 13): `GET /api/v1/approvals/{id}/payload`.

Built by the same function as the stored decision's (`payloads.decision_payload_for`) after
the same checks as deciding, so the bytes a device signs are the bytes the desk will store
and the gate will verify."""

from __future__ import annotations

import uuid
from typing import Any

from django.db import transaction
from django.utils import timezone

from reviewdesk.approvals.checks import approval_check_decide
from reviewdesk.approvals.device import device_key_for_signing
from reviewdesk.approvals.models import Verdict
from reviewdesk.approvals.payloads import decision_payload_for


def approval_device_payload(
    *,
    approval_id: Any,
    reviewer: Any,
    verdict: str,
    arguments: Any,
    checkpoint_id: str,
    key_id: str,
    reason: str = "",
    note: str = "",
    external_ref: str = "",
    answer: Any = None,
) -> dict[str, Any]:
    """The payload a device key signs for this decision, after the same checks as deciding
    (nothing is stored: the client posts it back, signed, with the decision)."""
    with transaction.atomic():
        approval, run = approval_check_decide(
            approval_id=approval_id,
            reviewer=reviewer,
            verdict=verdict,
            arguments=arguments,
            checkpoint_id=checkpoint_id,
            reason=reason,
            note=note,
            external_ref=external_ref,
            answer=answer,
        )
        key = device_key_for_signing(reviewer=reviewer, key_id=key_id)
        return decision_payload_for(
            approval=approval,
            run=run,
            reviewer=reviewer,
            verdict=verdict,
            to_run=arguments if verdict == Verdict.EDIT else approval.arguments,
            texts={"reason": reason, "note": note, "external_ref": external_ref.strip()},
            decision_id=uuid.uuid4(),
            issued_at=timezone.now(),
            nonce=None,
            key_id=key.key_id,
            device=True,
            answer=answer,
        )
