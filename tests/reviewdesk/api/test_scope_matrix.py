"""THE SCOPE MATRIX: who may call every API operation, with which token scope.

Start here to learn who may call what. Each row is an operation of the OpenAPI document
(`/api/schema/`), each column a caller:

- `none`: no credentials at all;
- `submit`, `review`, `audit`: the operation's rightful user (its actor: carol, who submits and
  owns the run and the webhook; alice, a reviewer, for the approvals) holding a token with
  that one scope;
- `other`: another user holding a token with every scope (dave, a second submitter, for
  carol's things; olivia, who has no role, for the approvals).

A cell is the status the operation answers: 401 nobody, 403 the token lacks the scope (code
`missing_scope`) or the user may not (code `forbidden`), 404 not theirs to see (the same answer
as missing), else its success status. Three checks keep the table honest:

1. every operation in the document has a row, and every row an operation (a new endpoint
   fails here until someone decides who may call it);
2. the document's `x-required-scopes` agree with the row (a scope listed there succeeds for
   the actor, any other scope is 403; none listed means any scope reads);
3. each cell is asserted against the running API, in-process (DRF's test client; the two SSE
   streams through the ASGI application itself), so an endpoint that forgets its scope or
   ownership check fails its cell.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import pytest
from asgiref.testing import ApplicationCommunicator
from django.test import Client

from reviewdesk.accounts.roles import SUBMITTERS
from reviewdesk.accounts.services import token_create
from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.runs.execution import run_execute
from reviewdesk.runs.external.submit import ExternalSubmission, external_submit
from reviewdesk.runs.models import Run
from reviewdesk.runs.services import run_cancel, run_submit
from reviewdesk.webhooks.models import WebhookDelivery
from reviewdesk.webhooks.services import webhook_register
from tests.conftest import SEND_EMAIL_SCRIPT, make_user

# One gated call of an external run (tests/reviewdesk/external), its hash the desk's own.
EXTERNAL_CALL = {
    "tool_call_id": "call_1",
    "tool": "refund_payment",
    "arguments": {"order_id": "1", "amount": 250},
    "arguments_sha256": "34b9f9846f87c35e41fd372f32976d40ff8a7ab66f6b0327f954be368993b6e2",
}

CALLERS = ("none", "submit", "review", "audit", "other")

# operation id: (actor, {caller: status}). The actor is who the operation is for.
MATRIX: dict[str, tuple[str, dict[str, int]]] = {
    # Runs: reading needs any scope; the run must be one the user may see.
    "runs_list": ("carol", {"none": 401, "submit": 200, "review": 200, "audit": 200, "other": 200}),
    "runs_get": ("carol", {"none": 401, "submit": 200, "review": 200, "audit": 200, "other": 404}),
    "runs_events": ("carol", {"none": 401, "submit": 200, "review": 200, "audit": 200, "other": 404}),
    "runs_stream": ("carol", {"none": 401, "submit": 200, "review": 200, "audit": 200, "other": 404}),
    "stream": ("carol", {"none": 401, "submit": 200, "review": 200, "audit": 200, "other": 200}),
    # Submitting and controlling: submit scope (cancel: submit or review, the service decides who).
    "runs_submit": ("carol", {"none": 401, "submit": 201, "review": 403, "audit": 403, "other": 201}),
    # A token acts only in its scopes' roles: carol is the submitter, not a reviewer, so her
    # review-scoped token may not cancel (403 forbidden) though the scope admits reviewers.
    "runs_cancel": ("carol", {"none": 401, "submit": 200, "review": 403, "audit": 403, "other": 404}),
    "runs_retry": ("carol", {"none": 401, "submit": 201, "review": 403, "audit": 403, "other": 404}),
    "runs_follow_up": ("carol", {"none": 401, "submit": 201, "review": 403, "audit": 403, "other": 404}),
    # Approvals: reading needs any scope; deciding needs review.
    "approvals_list": ("alice", {"none": 401, "submit": 200, "review": 200, "audit": 200, "other": 200}),
    "approvals_get": ("alice", {"none": 401, "submit": 200, "review": 200, "audit": 200, "other": 404}),
    "approvals_decide": ("alice", {"none": 401, "submit": 403, "review": 201, "audit": 403, "other": 403}),
    "approvals_handover": ("alice", {"none": 401, "submit": 403, "review": 200, "audit": 403, "other": 403}),
    # The bytes a device key signs: the same checks as deciding, with alice's endorsed key.
    "approvals_payload": ("alice", {"none": 401, "submit": 403, "review": 200, "audit": 403, "other": 403}),
    # Standing grants: reading needs any scope; revoking needs review, and the grant's owner.
    "grants_list": ("alice", {"none": 401, "submit": 200, "review": 200, "audit": 200, "other": 200}),
    "grants_revoke": ("alice", {"none": 401, "submit": 403, "review": 200, "audit": 403, "other": 404}),
    # Webhooks: submit scope; each user's own.
    "webhooks_list": ("carol", {"none": 401, "submit": 200, "review": 403, "audit": 403, "other": 200}),
    "webhooks_create": ("carol", {"none": 401, "submit": 201, "review": 403, "audit": 403, "other": 201}),
    "webhooks_deliveries": ("carol", {"none": 401, "submit": 200, "review": 403, "audit": 403, "other": 404}),
    "webhooks_resend": ("carol", {"none": 401, "submit": 202, "review": 403, "audit": 403, "other": 404}),
    # The loaded agents: the same for every signed-in caller, any scope; nobody else.
    "agents_list": ("carol", {"none": 401, "submit": 200, "review": 200, "audit": 200, "other": 200}),
    "agents_get": ("carol", {"none": 401, "submit": 200, "review": 200, "audit": 200, "other": 200}),
    # The audit trail: audit scope, and an admin (olivia, with every scope but no role: forbidden).
    "audit_list": ("admin", {"none": 401, "submit": 403, "review": 403, "audit": 200, "other": 403}),
    # External runs: a framework's account submits (dave makes his own run); consume and report
    # are the submitter's only, on its own run (anyone else: 404, as missing).
    "external_approvals_submit": (
        "carol",
        {"none": 401, "submit": 201, "review": 403, "audit": 403, "other": 201},
    ),
    "approvals_consume": ("carol", {"none": 401, "submit": 200, "review": 403, "audit": 403, "other": 404}),
    "runs_report": ("carol", {"none": 401, "submit": 200, "review": 403, "audit": 403, "other": 404}),
    # The desk's public keys: public, to anyone (trust on first use; clients pin them).
    "keys_list": ("carol", {"none": 200, "submit": 200, "review": 200, "audit": 200, "other": 200}),
}
# Operations anyone may call, with no credentials at all.
PUBLIC = {"keys_list"}
# Cells where the scope is documented for the operation but admits a role the actor lacks.
SCOPE_ADMITS_ANOTHER_ROLE = {("runs_cancel", "review")}
STREAMS = ("runs_stream", "stream")  # served by the ASGI application, not by Django's views


@dataclass
class World:
    """carol's run waiting on alice (with its approval), a run of hers that succeeded, one she
    cancelled, a webhook of hers with one delivery, a standing grant alice made, and alice's
    endorsed device key."""

    waiting: Run
    approval_id: str
    checkpoint_id: str
    succeeded: Run
    cancelled: Run
    webhook_id: str
    delivery_id: str
    grant_id: str
    device_key_id: str
    external_run_id: str
    external_approval_id: str
    external_decision_id: str
    external_nonce: str


@pytest.fixture
def world(personas, settings, device_keys) -> World:
    settings.DESK_WEBHOOKS_ALLOW_PRIVATE = True

    def run(script) -> Run:
        made = run_submit(
            submitter=personas.carol,
            agent="demo",
            input="x",
            model={"provider": "scripted", "script": script},
        )
        run_execute(run_id=made.id, worker="in-process")
        made.refresh_from_db()
        return made

    waiting = run(SEND_EMAIL_SCRIPT)
    approval = waiting.approvals.get(status="pending")
    cancelled = run_cancel(run_id=run(SEND_EMAIL_SCRIPT).id, user=personas.carol)
    endpoint, _ = webhook_register(owner=personas.carol, url="http://127.0.0.1:9/", events=["run.failed"])
    delivery = WebhookDelivery.objects.create(endpoint=endpoint, event_type="run.failed", body="{}")
    granted = run(SEND_EMAIL_SCRIPT).approvals.get(status="pending")
    decision = approval_decide(
        approval_id=granted.id,
        reviewer=personas.alice,
        verdict="approve",
        checkpoint_id=str(granted.checkpoint_id),
        grant={"match": "exact", "scope": "run"},
    )
    external = external_submit(
        submitter=personas.carol,
        submission=ExternalSubmission(
            external_id="oa:thread-1",
            framework="openai-agents",
            agent="support-bot",
            checkpoint="state-1",
            calls=[EXTERNAL_CALL],
        ),
    )
    external_approval = external.approvals[0]
    external_decision = approval_decide(
        approval_id=external_approval.id,
        reviewer=personas.alice,
        verdict="approve",
        checkpoint_id=str(external_approval.checkpoint_id),
    )
    return World(
        external_run_id=str(external.run.id),
        external_approval_id=str(external_approval.id),
        external_decision_id=str(external_decision.id),
        external_nonce=external_decision.nonce,
        waiting=waiting,
        approval_id=str(approval.id),
        checkpoint_id=str(approval.checkpoint_id),
        succeeded=run([{"content": "Done."}]),
        cancelled=cancelled,
        webhook_id=str(endpoint.id),
        delivery_id=str(delivery.id),
        grant_id=str(decision.grant.id),
        device_key_id=device_keys.alice_key_id,
    )


# operation id → (method, path, body) for the world.
REQUESTS: dict[str, Callable[[World], tuple[str, str, Any]]] = {
    "runs_list": lambda w: ("get", "/api/v1/runs", None),
    "runs_get": lambda w: ("get", f"/api/v1/runs/{w.waiting.id}", None),
    "runs_events": lambda w: ("get", f"/api/v1/runs/{w.waiting.id}/events", None),
    "runs_stream": lambda w: ("get", f"/api/v1/runs/{w.waiting.id}/stream", None),
    "stream": lambda w: ("get", "/api/v1/stream", None),
    "runs_submit": lambda w: (
        "post",
        "/api/v1/runs",
        {"agent": "demo", "input": "x", "model": {"provider": "scripted", "script": [{"content": "ok"}]}},
    ),
    "runs_cancel": lambda w: ("post", f"/api/v1/runs/{w.waiting.id}/cancel", None),
    "runs_retry": lambda w: ("post", f"/api/v1/runs/{w.cancelled.id}/retry", None),
    "runs_follow_up": lambda w: ("post", f"/api/v1/runs/{w.succeeded.id}/messages", {"input": "and then?"}),
    "approvals_list": lambda w: ("get", "/api/v1/approvals", None),
    "approvals_get": lambda w: ("get", f"/api/v1/approvals/{w.approval_id}", None),
    "approvals_decide": lambda w: (
        "post",
        f"/api/v1/approvals/{w.approval_id}/decision",
        {"verdict": "approve", "checkpoint_id": w.checkpoint_id},
    ),
    "approvals_payload": lambda w: (
        "get",
        f"/api/v1/approvals/{w.approval_id}/payload?verdict=approve&checkpoint_id={w.checkpoint_id}"
        f"&key_id={quote(w.device_key_id)}",
        None,
    ),
    "approvals_handover": lambda w: (
        "post",
        f"/api/v1/approvals/{w.approval_id}/handover",
        {"to": "bob", "note": "yours"},
    ),
    "grants_list": lambda w: ("get", "/api/v1/grants", None),
    "grants_revoke": lambda w: ("post", f"/api/v1/grants/{w.grant_id}/revoke", None),
    "webhooks_list": lambda w: ("get", "/api/v1/webhooks", None),
    "webhooks_create": lambda w: (
        "post",
        "/api/v1/webhooks",
        {"url": "http://127.0.0.1:9/", "events": ["run.failed"]},
    ),
    "webhooks_deliveries": lambda w: ("get", f"/api/v1/webhooks/{w.webhook_id}/deliveries", None),
    "webhooks_resend": lambda w: (
        "post",
        f"/api/v1/webhooks/{w.webhook_id}/deliveries/{w.delivery_id}/resend",
        None,
    ),
    "agents_list": lambda w: ("get", "/api/v1/agents", None),
    "agents_get": lambda w: ("get", "/api/v1/agents/demo", None),
    "audit_list": lambda w: ("get", "/api/v1/audit", None),
    "external_approvals_submit": lambda w: (
        "post",
        "/api/v1/external/approvals",
        {
            "run": {"external_id": "oa:thread-2", "framework": "openai-agents", "agent": "support-bot"},
            "checkpoint": "state-1",
            "calls": [EXTERNAL_CALL],
        },
    ),
    "approvals_consume": lambda w: (
        "post",
        f"/api/v1/approvals/{w.external_approval_id}/consume",
        {"decision_id": w.external_decision_id, "nonce": w.external_nonce},
    ),
    "runs_report": lambda w: (
        "post",
        f"/api/v1/runs/{w.external_run_id}/report",
        {"events": [{"type": "run.finished", "status": "succeeded", "output": "done"}]},
    ),
    "keys_list": lambda w: ("get", "/api/v1/keys", None),
}


def documented_operations() -> dict[str, dict[str, Any]]:
    response = Client().get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    document = response.json() if response["Content-Type"].endswith("json") else _yaml(response.content)
    return {
        operation["operationId"]: operation
        for path in document["paths"].values()
        for operation in path.values()
        if isinstance(operation, dict) and "operationId" in operation
    }


def _yaml(content: bytes) -> dict:
    import yaml

    return yaml.safe_load(content)


@pytest.mark.django_db
def test_every_operation_in_the_openapi_document_has_a_row_and_every_row_an_operation():
    assert set(documented_operations()) == set(MATRIX) == set(REQUESTS)


@pytest.mark.django_db
def test_the_documented_scopes_agree_with_the_matrix():
    success = {200, 201, 202}
    for operation_id, operation in documented_operations().items():
        required = operation["x-required-scopes"]
        _, row = MATRIX[operation_id]
        for scope in ("submit", "review", "audit"):
            allowed = not required or scope in required
            if (operation_id, scope) in SCOPE_ADMITS_ANOTHER_ROLE:
                assert allowed and row[scope] == 403, (operation_id, scope)
                continue
            assert (row[scope] in success) == allowed, (operation_id, scope, required, row[scope])
        assert row["none"] == (200 if operation_id in PUBLIC else 401), operation_id
        assert "401" in operation["responses"] and ("403" in operation["responses"] or not required)


def caller_token(personas, actor: str, caller: str) -> str | None:
    if caller == "none":
        return None
    if caller == "other":
        user = make_user("dave", SUBMITTERS) if actor == "carol" else personas.olivia
        scopes: tuple[str, ...] = ("submit", "review", "audit")
    else:
        user, scopes = getattr(personas, actor), (caller,)
    return token_create(user=user, scopes=scopes)[1]


CELLS = [(op, caller) for op in MATRIX for caller in CALLERS if op not in STREAMS]


@pytest.mark.django_db
@pytest.mark.parametrize(("operation_id", "caller"), CELLS)
def test_each_operation_answers_each_caller_as_the_matrix_says(
    operation_id, caller, world, personas, api_client
):
    actor, row = MATRIX[operation_id]
    method, path, body = REQUESTS[operation_id](world)
    token = caller_token(personas, actor, caller)
    if token:
        api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    response = (
        getattr(api_client, method)(path, body, format="json") if body else getattr(api_client, method)(path)
    )
    assert response.status_code == row[caller], (operation_id, caller, response.content[:300])
    if row[caller] == 403:
        assert response.json()["code"] in ("missing_scope", "forbidden")


@pytest.fixture
def api_client():
    from rest_framework.test import APIClient

    return APIClient()


async def _stream_status(path: str, token: str | None) -> int:
    """The status line of one SSE request through the ASGI application; then hang up."""
    from reviewdesk.asgi import application

    headers = [(b"host", b"testserver")]
    if token:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    scope = {
        "type": "http",
        "method": "GET",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": headers,
        "http_version": "1.1",
        "scheme": "http",
        "server": ("testserver", 80),
        "client": ("127.0.0.1", 5000),
    }
    communicator = ApplicationCommunicator(application, scope)
    await communicator.send_input({"type": "http.request", "body": b""})
    start = await communicator.receive_output(timeout=10)
    await communicator.send_input({"type": "http.disconnect"})
    await communicator.wait(timeout=10)
    return start["status"]


STREAM_CELLS = [(op, caller) for op in STREAMS for caller in CALLERS]


@pytest.mark.django_db(transaction=True)  # the stream reads the database from its own thread
@pytest.mark.parametrize(("operation_id", "caller"), STREAM_CELLS)
def test_each_stream_answers_each_caller_as_the_matrix_says(operation_id, caller, world, personas):
    actor, row = MATRIX[operation_id]
    _, path, _ = REQUESTS[operation_id](world)
    token = caller_token(personas, actor, caller)
    assert asyncio.run(_stream_status(path, token)) == row[caller], (operation_id, caller)
