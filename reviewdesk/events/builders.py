"""The one place desk events and their payloads are built."""

from __future__ import annotations

from typing import Any

from reviewdesk.approvals.models import ApprovalRequest
from reviewdesk.runs.models import Run


def iso(value) -> str | None:
    """RFC 3339 in UTC with a Z, as every timestamp the desk shows or signs."""
    return value.isoformat().replace("+00:00", "Z") if value else None


def reviewer_of(approval: ApprovalRequest) -> dict[str, Any]:
    return {"users": list(approval.assignees), "group": "reviewers"}


def approval_data(approval: ApprovalRequest) -> dict[str, Any]:
    decision = getattr(approval, "decision", None) if approval.status != "pending" else None
    return {
        "id": str(approval.id),
        "kind": approval.kind,
        "run": str(approval.run_id),
        "tool": approval.tool,
        "tool_call_id": approval.tool_call_id,
        "arguments": approval.arguments,
        "arguments_sha256": approval.arguments_sha256,
        "reason": approval.reason,
        "reviewer": reviewer_of(approval),
        "expires_at": iso(approval.expires_at),
        "checkpoint_id": str(approval.checkpoint_id),
        "status": approval.status,
        "created_at": iso(approval.created_at),
        "decision": decision_data(decision) if decision else None,
    }


def decision_data(decision) -> dict[str, Any]:
    return {
        "id": str(decision.id),
        "verdict": decision.verdict,
        "reason": decision.reason,
        "note": decision.note,
        "external_ref": decision.external_ref or None,
        "reviewer": decision.reviewer.username,
        "arguments_sha256": decision.arguments_sha256,
        "arguments": decision.arguments,
        "decided_at": iso(decision.decided_at),
        "payload": decision.payload,
        "signature": decision.signature,
        "key_id": decision.key_id,
        "consumed_at": iso(decision.consumed_at),
    }


def run_data(run: Run) -> dict[str, Any]:
    return {
        "id": str(run.id),
        "agent": run.agent,
        "status": run.status,
        "revision": run.revision,
        "error": run.error,
        "updated_at": iso(run.updated_at),
    }
