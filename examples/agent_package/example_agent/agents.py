"""The `helpdesk` agent: answers support tickets, with three tools, one of each effect class.

    read_ticket   read                 runs at once, no human: it changes nothing
    tag_ticket    idempotent_external  runs at once, unless the tag is "urgent" (then a human
                                       decides); safe to repeat, keyed by the call's idempotency key
    send_reply    external             always a human first; recorded `pending` before it runs and
                                       `confirmed` after, so a crash in between goes to a human

The desk imports this module when DESK_AGENTS names it, and the `register(...)` below declares
the agent. Its "world" is a directory of plain files (EXAMPLE_AGENT_DIR), so that you can watch
every effect with `cat`; a real package would call its ticketing system and mail service here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from agents.registry import Agent, register
from agents.tools import ALWAYS, NEVER, Effect, Tool, ToolContext, ToolError

TICKETS = {
    "T-1": {"id": "T-1", "from": "ada@example.com", "subject": "Refund?", "body": "Where is my refund?"},
    "T-2": {"id": "T-2", "from": "grace@example.com", "subject": "Login", "body": "I cannot log in."},
}


def data_dir() -> Path:
    """Where the tools' effects land: $EXAMPLE_AGENT_DIR, else ./example-agent-data."""
    path = Path(os.environ.get("EXAMPLE_AGENT_DIR", "example-agent-data"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def read_ticket(arguments: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    ticket = TICKETS.get(arguments["ticket_id"])
    if ticket is None:
        raise ToolError(f"no ticket {arguments['ticket_id']}")  # the model reads it as the result
    return ticket


def tag_ticket(arguments: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    # Idempotent: one file per call, named by the key the desk gives it, so a retry rewrites
    # the same file rather than tagging twice.
    record = {"ticket_id": arguments["ticket_id"], "tag": arguments["tag"], "run_id": ctx.run_id}
    (data_dir() / f"tag-{ctx.idempotency_key.replace(':', '_')}.json").write_text(json.dumps(record))
    return {"tagged": True, **record}


def tag_needs_approval(arguments: dict[str, Any]) -> bool:
    """An approval policy: a function of the call's arguments. Urgent tags page someone."""
    return arguments.get("tag") == "urgent"


def send_reply(arguments: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    # External and not idempotent: each call appends one line. The desk runs it only after a
    # reviewer's signed approval, verified just before this function is called.
    line = {"ticket_id": arguments["ticket_id"], "body": arguments["body"], "run_id": ctx.run_id}
    with (data_dir() / "outbox.jsonl").open("a") as outbox:
        outbox.write(json.dumps(line) + "\n")
    return {"sent": True, "ticket_id": arguments["ticket_id"]}


TICKET_ID = {"type": "string", "pattern": "^T-[0-9]+$"}

register(
    Agent(
        name="helpdesk",
        system_prompt="You answer support tickets. Read the ticket first; a human reviews every reply.",
        tools=(
            Tool(
                name="read_ticket",
                description="Read a support ticket by its id (T-1, T-2, ...).",
                parameters={
                    "type": "object",
                    "properties": {"ticket_id": TICKET_ID},
                    "required": ["ticket_id"],
                    "additionalProperties": False,
                },
                effect=Effect.READ,
                approval=NEVER,
                func=read_ticket,
            ),
            Tool(
                name="tag_ticket",
                description="Tag a ticket (billing, login, urgent, ...). Urgent tags need a human.",
                parameters={
                    "type": "object",
                    "properties": {"ticket_id": TICKET_ID, "tag": {"type": "string", "minLength": 1}},
                    "required": ["ticket_id", "tag"],
                    "additionalProperties": False,
                },
                effect=Effect.IDEMPOTENT_EXTERNAL,
                approval=tag_needs_approval,
                func=tag_ticket,
            ),
            Tool(
                name="send_reply",
                description="Send a reply to the ticket's author.",
                parameters={
                    "type": "object",
                    "properties": {"ticket_id": TICKET_ID, "body": {"type": "string", "minLength": 1}},
                    "required": ["ticket_id", "body"],
                    "additionalProperties": False,
                },
                effect=Effect.EXTERNAL,
                approval=ALWAYS,
                func=send_reply,
            ),
        ),
    )
)
