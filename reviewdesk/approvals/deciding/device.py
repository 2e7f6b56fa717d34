"""Device-signed decisions at the desk: the payload a device signs, which key may sign, and
whether what it signed is exactly the decision the server would store.

The server checks before storing (422 `bad_signature` otherwise) so that a bad signature
is refused at the door; the worker's gate checks again under its pinned roots, and only
the gate's check is what a compromised web tier cannot skip.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from agents.decisions import signature_valid
from agents.trust import public_key_from_b64
from reviewdesk.accounts.models import DeviceKey, Endorsement, Revocation
from reviewdesk.approvals.deciding.checks import approval_check_decide
from reviewdesk.approvals.deciding.input import DecisionInput, DeviceSignature
from reviewdesk.approvals.deciding.payload import decision_payload_for
from reviewdesk.lib.errors import Invalid


def device_key_for_signing(*, reviewer: User, key_id: str) -> DeviceKey:
    """The reviewer's own endorsed, unrevoked device key with this id; 422 otherwise."""
    key = DeviceKey.objects.filter(user=reviewer, key_id=key_id).first()
    if key is None:
        raise Invalid(f"{key_id!r} is not one of your device keys", code="bad_signature")
    if Revocation.objects.filter(device_key=key).exists():
        raise Invalid(f"device key {key_id} has been revoked", code="bad_signature")
    if not Endorsement.objects.filter(device_key=key).exists():
        raise Invalid(f"device key {key_id} is not endorsed by an admin yet", code="bad_signature")
    return key


def device_payload_fields(payload: Any, *, now: datetime) -> tuple[uuid.UUID, datetime, str]:
    """The decision id, issue time and nonce the server chose in `/payload`, taken back from
    the signed payload; refused when it is not recent (DESK_DEVICE_PAYLOAD_MAX_AGE_SECONDS)."""
    if not isinstance(payload, dict):
        raise Invalid("the signed payload is a JSON object", code="bad_signature")
    try:
        decision_id = uuid.UUID(str(payload["decision_id"]))
        issued_at = datetime.fromisoformat(str(payload["issued_at"]))
        nonce = str(payload["nonce"])
    except (KeyError, ValueError):
        raise Invalid(
            "the signed payload lacks a decision id, issue time or nonce", code="bad_signature"
        ) from None
    if issued_at.tzinfo is None:
        raise Invalid("the signed payload's issue time has no time zone", code="bad_signature")
    age = now - issued_at
    if age > timedelta(seconds=settings.DESK_DEVICE_PAYLOAD_MAX_AGE_SECONDS) or age < -timedelta(minutes=1):
        raise Invalid(
            "the signed payload is too old (or from the future): fetch it again", code="bad_signature"
        )
    return decision_id, issued_at, nonce


def device_signature_check(*, key: DeviceKey, device: DeviceSignature, expected: dict[str, Any]) -> None:
    """The signed payload is the one the server would store for this decision, and `key` signed it."""
    if device.payload != expected:
        differing = sorted(
            k for k in expected.keys() | device.payload.keys() if expected.get(k) != device.payload.get(k)
        )
        raise Invalid(
            "the signed payload is not this decision's: " + ", ".join(differing),
            code="bad_signature",
            errors={"payload": differing},
        )
    if not signature_valid(public_key_from_b64(key.public_key), expected, device.signature):
        raise Invalid("the device signature does not verify", code="bad_signature")


def approval_device_payload(
    *, approval_id: Any, reviewer: User, decision: DecisionInput, key_id: str
) -> dict[str, Any]:
    """The payload a device key signs for this decision (`GET /api/v1/approvals/{id}/payload`),
    after the same checks as deciding: the bytes a device signs are the bytes the desk will
    store and the gate will verify. Nothing is stored: the client posts it back, signed, with
    the decision."""
    with transaction.atomic():
        approval, run = approval_check_decide(approval_id=approval_id, reviewer=reviewer, decision=decision)
        key = device_key_for_signing(reviewer=reviewer, key_id=key_id)
        return decision_payload_for(
            approval=approval,
            run=run,
            reviewer=reviewer,
            decision=decision,
            decision_id=uuid.uuid4(),
            issued_at=timezone.now(),
            nonce=None,
            key_id=key.key_id,
            device=True,
        )
