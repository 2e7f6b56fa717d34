"""An external run's calls, submitted through the real API as carol (a framework's service
account): bodies with their hashes computed as a client computes them (RFC 8785, SHA-256)."""

from __future__ import annotations

import copy
import hashlib
from typing import Any

import pytest
import rfc8785

REFUND = {"order_id": "1234", "amount": 250}
REFUND_SCHEMA = {
    "type": "object",
    "properties": {"order_id": {"type": "string"}, "amount": {"type": "number", "maximum": 1000}},
    "required": ["order_id", "amount"],
    "additionalProperties": False,
}


def args_sha256(arguments: Any) -> str:
    """What a client computes: SHA-256 over the arguments' RFC 8785 bytes (not the desk's code)."""
    return hashlib.sha256(rfc8785.dumps(arguments)).hexdigest()


def call(tool_call_id: str = "call_1", arguments: Any = None, **fields: Any) -> dict[str, Any]:
    arguments = copy.deepcopy(REFUND if arguments is None else arguments)
    body = {
        "tool_call_id": tool_call_id,
        "tool": "refund_payment",
        "arguments": arguments,
        "arguments_sha256": args_sha256(arguments),
        "schema": REFUND_SCHEMA,
        "verdicts": ["approve", "reject", "edit"],
        "description": "Refund an order",
        "reason": "The customer asked for a refund.",
        "preview": "Refund 250 EUR on order 1234",
    }
    body.update(fields)
    return body


def submit_body(*calls: dict[str, Any], external_id: str = "oa:thread-42", **fields: Any) -> dict[str, Any]:
    body = {
        "run": {
            "external_id": external_id,
            "framework": "openai-agents",
            "agent": "support-bot",
            "title": "Refund order 1234",
            "input": "Please refund my order 1234.",
            "metadata": {},
        },
        "checkpoint": "state-1",
        "resume_policy": "per_call",
        "calls": list(calls) or [call()],
        "context": {
            "messages": [{"role": "user", "content": "Please refund my order 1234."}],
            "truncated": False,
        },
    }
    body.update(fields)
    return body


@pytest.fixture
def submit(personas, api_as, django_capture_on_commit_callbacks):
    """submit(body=None, client=None) → the response of POST /api/v1/external/approvals, as
    carol with the submit scope unless another client is given."""
    carol = api_as(personas.carol, "submit")

    def post(body: dict[str, Any] | None = None, client=None, **headers: str):
        with django_capture_on_commit_callbacks(execute=True):
            return (client or carol).post(
                "/api/v1/external/approvals", body or submit_body(), format="json", **headers
            )

    return post


@pytest.fixture
def submitted(submit):
    """() → (the submit's response body, its first approval's id), submitted once."""

    def make(body: dict[str, Any] | None = None) -> tuple[dict[str, Any], str]:
        response = submit(body)
        assert response.status_code == 201, response.json()
        data = response.json()
        return data, data["approvals"][0]["id"]

    return make


@pytest.fixture
def decide_api(api_as, personas, django_capture_on_commit_callbacks):
    """decide_api(approval_id, verdict="approve", client=None, **body) → the decision response,
    by alice with the review scope unless another client is given."""
    alice = api_as(personas.alice, "review")

    def post(approval_id: str, verdict: str = "approve", client=None, **body: Any):
        from reviewdesk.approvals.models import ApprovalRequest

        checkpoint_id = str(ApprovalRequest.objects.get(pk=approval_id).checkpoint_id)
        body = {"verdict": verdict, "checkpoint_id": checkpoint_id, **body}
        with django_capture_on_commit_callbacks(execute=True):
            return (client or alice).post(f"/api/v1/approvals/{approval_id}/decision", body, format="json")

    return post
