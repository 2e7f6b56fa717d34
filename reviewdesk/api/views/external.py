"""External runs (runs/external/): an agent framework outside the desk submits its gated calls,
consumes the decision once before its tool runs, and reports the outcome; and the desk's public
keys, which such a framework verifies decisions with (trust on first use: pin them)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.urls import reverse
from drf_spectacular.utils import extend_schema
from rest_framework.permissions import AllowAny
from rest_framework.response import Response

from reviewdesk.api import schema as doc
from reviewdesk.api.idempotency import idempotent
from reviewdesk.api.permissions import CanSubmit
from reviewdesk.api.serializers import ConsumeSerializer, ExternalSubmitSerializer, ReportSerializer
from reviewdesk.api.views.base import DeskAPIView
from reviewdesk.approvals.models import ApprovalRequest
from reviewdesk.approvals.reads.representation import decision_data
from reviewdesk.approvals.signing import desk_public_keys
from reviewdesk.lib.times import rfc3339_sortable
from reviewdesk.runs.external.consume import external_consume
from reviewdesk.runs.external.report import external_report
from reviewdesk.runs.external.submit import ExternalSubmission, external_submit
from reviewdesk.runs.models import Run

KEYS_WARNING = (
    "trust on first use: pin these keys in REVIEWDESK_KEYS (a JSON map of key_id to public_key) "
    "or REVIEWDESK_KEYS_FILE, and verify every decision against the pinned keys only; a key fetched "
    "here at each start trusts whoever answers this URL"
)


def external_run_data(run: Run) -> dict[str, Any]:
    return {
        "id": str(run.id),
        "external_id": run.external_id,
        "framework": run.framework,
        "status": run.status,
        "kind": run.kind,
    }


def external_approval_data(approval: ApprovalRequest) -> dict[str, Any]:
    decision = approval.decision
    return {
        "id": str(approval.id),
        "tool_call_id": approval.tool_call_id,
        "status": approval.status,
        "verdicts": list(approval.allowed_verdicts),
        "arguments_sha256": approval.arguments_sha256,
        # Where this call was raised, which its decision signs: a call met again keeps the
        # checkpoint of its first submit, whatever checkpoint this submit names.
        "checkpoint_id": str(approval.checkpoint_id),
        "external_checkpoint": approval.checkpoint.snapshot.get("external_checkpoint", ""),
        "expires_at": rfc3339_sortable(approval.expires_at),
        "url": settings.DESK_PUBLIC_URL + reverse("approval", args=[approval.id]),
        "decision": decision_data(decision) if decision else None,
    }


class ExternalApprovalsView(DeskAPIView):
    permission_classes = [CanSubmit]

    @extend_schema(
        operation_id="external_approvals_submit",
        summary="Submit an external run's gated calls: one approval per call",
        description=(
            "Scope: submit. An agent framework outside the desk (docs/external-runs.md) submits the "
            "calls it paused on. The run is upserted by (this account, run.external_id); each new "
            "`checkpoint` value becomes a desk checkpoint. Idempotent by (account, external_id, "
            "tool_call_id): the same call with the same hash returns its approval as it stands "
            "(200 when nothing new was made), with another hash 409 `conflict`. The desk recomputes "
            "each `arguments_sha256` over the arguments' RFC 8785 bytes (422 `arguments_sha256`). "
            "`verdicts` must hold approve and reject; edit is kept only with a `schema`. Caps: 64 KiB "
            "of canonical arguments per call, 256 KiB of context, 50 calls. Idempotency-Key honoured."
        ),
        request=ExternalSubmitSerializer,
        parameters=[doc.IDEMPOTENCY_KEY],
        responses={
            201: doc.ExternalSubmitOutSerializer,
            200: doc.ExternalSubmitOutSerializer,
            **doc.WRITE_PROBLEMS,
            429: doc.problem_response(429),
        },
        extensions=doc.scopes("submit"),
    )
    def post(self, request):
        def submit() -> Response:
            serializer = ExternalSubmitSerializer(data=request.data)
            serializer.is_valid(raise_exception=True)
            data = serializer.validated_data
            run = data["run"]
            submitted = external_submit(
                submitter=request.user,
                submission=ExternalSubmission(
                    external_id=run["external_id"],
                    framework=run["framework"],
                    agent=run["agent"],
                    title=run["title"],
                    input=run["input"],
                    metadata=run["metadata"],
                    checkpoint=data["checkpoint"],
                    resume_policy=data["resume_policy"],
                    calls=data["calls"],
                    context=data.get("context"),
                    reviewers=data.get("reviewers", []),
                    approval_ttl_seconds=data.get("approval_ttl_seconds"),
                ),
            )
            return Response(
                {
                    "run": external_run_data(submitted.run),
                    "audience": request.user.get_username(),
                    "checkpoint_id": str(submitted.checkpoint.pk),
                    "approvals": [external_approval_data(a) for a in submitted.approvals],
                },
                status=201 if submitted.created else 200,
            )

        return idempotent(request, submit)


class ApprovalConsumeView(DeskAPIView):
    permission_classes = [CanSubmit]

    @extend_schema(
        operation_id="approvals_consume",
        summary="Consume an external call's decision, once, right before its tool runs",
        description=(
            "Scope: submit; the run's submitter only (404 for anyone else), external runs only (409 "
            "`not_external`). A compare-and-set on the decision: 409 `consumed` when it was already, "
            "410 `expired` past its not_after, 409 `ended` once the run ended, 422 when decision_id and "
            "nonce are not the approval's settling decision. An approve or an edit opens the call's "
            "ledger row (pending) in the same transaction; report the outcome with /runs/{id}/report."
        ),
        request=ConsumeSerializer,
        responses={200: doc.ConsumeOutSerializer, **doc.WRITE_PROBLEMS, 410: doc.problem_response(410)},
        extensions=doc.scopes("submit"),
    )
    def post(self, request, approval_id):
        serializer = ConsumeSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        consumed_at = external_consume(
            approval_id=approval_id, user=request.user, decision_id=data["decision_id"], nonce=data["nonce"]
        )
        return Response({"consumed_at": rfc3339_sortable(consumed_at)})


class RunReportView(DeskAPIView):
    permission_classes = [CanSubmit]

    @extend_schema(
        operation_id="runs_report",
        summary="Report an external run's tool outcomes and its end",
        description=(
            "Scope: submit; the run's submitter only (404 for anyone else), external runs only (409 "
            "`not_external`). `tool.finished` confirms the call's pending ledger row (`ledger`: "
            "confirmed, or unchanged when there was none pending); `run.finished` ends the run and "
            "cancels what still waits. 409 `ended` for anything after the end. Idempotency-Key honoured."
        ),
        request=ReportSerializer,
        parameters=[doc.IDEMPOTENCY_KEY],
        responses={200: doc.ReportOutSerializer, **doc.WRITE_PROBLEMS},
        extensions=doc.scopes("submit"),
    )
    def post(self, request, run_id):
        def report() -> Response:
            serializer = ReportSerializer(data=request.data)
            serializer.is_valid(raise_exception=True)
            reported = external_report(
                run_id=run_id, user=request.user, events=serializer.validated_data["events"]
            )
            return Response({"run": external_run_data(reported.run), "ledger": reported.ledger})

        return idempotent(request, report)


class KeysView(DeskAPIView):
    # Public: a framework needs them before it holds anything else. Nothing here is secret.
    permission_classes = [AllowAny]

    @extend_schema(
        operation_id="keys_list",
        summary="The desk's public keys, which verify its signed decisions",
        description=(
            "No authentication. Every Ed25519 key in the desk's keyring (DESK_VERIFY_KEYS_FILE): the "
            "one signing now is `active`, older ones `retired` (their decisions still verify). Trust "
            "on first use only: pin the keys in the client's configuration. Decisions signed by a "
            "reviewer's device key name that key instead (not listed here)."
        ),
        responses={200: doc.KeysOutSerializer, **doc.READ_PROBLEMS},
        extensions=doc.scopes(),
    )
    def get(self, request):
        return Response({"keys": desk_public_keys(), "warning": KEYS_WARNING})
