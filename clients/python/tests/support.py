"""Helpers the client's tests share (imported by name: this directory is on sys.path)."""

from __future__ import annotations

import base64
import copy
import uuid
from typing import Any

from reviewdesk_client import DeskClient, Ticket, jcs

ARGUMENTS = {"order_id": "1234", "amount": 250, "note": "caf\u00e9 \u2603", "lines": [{"qty": 1.5}]}
SCHEMA = {
    "type": "object",
    "properties": {
        "order_id": {"type": "string"},
        "amount": {"type": "number", "maximum": 1000},
        "note": {"type": "string"},
        "lines": {"type": "array"},
    },
    "required": ["order_id", "amount"],
    "additionalProperties": False,
}


def external_id() -> str:
    return f"test:{uuid.uuid4().hex[:12]}"


def submit_one(
    desk: DeskClient,
    *,
    external: str | None = None,
    tool_call_id: str = "call_1",
    arguments: Any = None,
    verdicts: tuple[str, ...] = ("approve", "reject", "edit"),
    schema: dict | None = SCHEMA,
    checkpoint: str = "ckpt-1",
    agent: str = "support-bot",
    **submit: Any,
) -> Ticket:
    """Submit one gated `refund_payment` call; its ticket."""
    call = desk.call(
        tool_call_id,
        "refund_payment",
        ARGUMENTS if arguments is None else arguments,
        schema=schema,
        verdicts=verdicts,
        reason="the customer asked twice",
        preview="Refund 250 to order 1234",
    )
    tickets = desk.submit(
        external_id=external or external_id(),
        framework="test",
        agent=agent,
        checkpoint=checkpoint,
        calls=[call],
        title="Refund order 1234",
        input="refund order 1234",
        context=[{"role": "user", "content": "please refund order 1234"}],
        **submit,
    )
    assert len(tickets) == 1
    return tickets[0]


def resigned(decision: dict, payload: dict) -> dict:
    """`decision` serving `payload` (its bytes re-encoded) under the desk's signature of the
    original: what a forger who changes a field without the key can send."""
    forged = copy.deepcopy(decision)
    forged["payload"] = payload
    forged["payload_b64"] = base64.b64encode(jcs(payload)).decode()
    return forged
