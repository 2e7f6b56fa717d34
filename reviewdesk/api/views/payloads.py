"""The bytes a reviewer's device key signs: GET /api/v1/approvals/{id}/payload.
The signed decision itself is posted to .../decision (views.ApprovalDecisionView)."""

from __future__ import annotations

import base64

from drf_spectacular.utils import extend_schema
from rest_framework.response import Response

from agents.decisions import payload_bytes
from reviewdesk.api import schema as doc
from reviewdesk.api.permissions import CanReview
from reviewdesk.api.serializers import DecisionPayloadQuerySerializer
from reviewdesk.api.views.base import DeskAPIView
from reviewdesk.approvals.deciding.device import approval_device_payload
from reviewdesk.approvals.deciding.input import DecisionInput


class ApprovalPayloadView(DeskAPIView):
    permission_classes = [CanReview]

    @extend_schema(
        operation_id="approvals_payload",
        summary="The exact bytes a device key signs for a decision",
        description=(
            "Scope: review. The same checks as deciding (403, 409, 410, 422), and the device key "
            "must be the caller's, endorsed and not revoked (422 `bad_signature`). Nothing is "
            "stored: sign `bytes` (base64 of the payload's RFC 8785 canonical JSON) with the device "
            "key and POST the decision with `signature`, `key_id` and this `payload`."
        ),
        parameters=[DecisionPayloadQuerySerializer],
        responses={
            200: doc.DecisionPayloadOutSerializer,
            **doc.WRITE_PROBLEMS,
            410: doc.problem_response(410),
        },
        extensions=doc.scopes("review"),
    )
    def get(self, request, approval_id):
        query = DecisionPayloadQuerySerializer(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        data = query.validated_data
        decision = DecisionInput(
            verdict=data["verdict"],
            checkpoint_id=str(data["checkpoint_id"]),
            reason=data["reason"],
            note=data["note"],
            external_ref=data["external_ref"],
            arguments=data.get("arguments"),
            answer=data.get("answer"),
        )
        payload = approval_device_payload(
            approval_id=approval_id, reviewer=request.user, decision=decision, key_id=data["key_id"]
        )
        signed = payload_bytes(payload)
        return Response(
            {"payload": payload, "bytes": base64.b64encode(signed).decode(), "canonical": signed.decode()}
        )
