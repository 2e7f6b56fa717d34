"""A resumer handler for the tests: restore the call's arguments from the store, verify the
decision, consume it, and append one line per run of the "tool" to $RESUMER_RECORD."""

from __future__ import annotations

import json
import os

from reviewdesk_client import DeskClient, Outcome, Ticket


def record(desk: DeskClient, ticket: Ticket, outcome: Outcome) -> None:
    arguments = json.loads(desk.store.get_state(f"arguments:{ticket.approval_id}") or "null")
    verified = desk.verify(outcome.decision or {}, ticket, current_arguments=arguments)
    desk.consume(verified)
    with open(os.environ["RESUMER_RECORD"], "a") as out:
        out.write(json.dumps({"approval": ticket.approval_id, "verdict": verified.verdict}) + "\n")


def record_only(desk: DeskClient, ticket: Ticket, outcome: Outcome) -> None:
    """A handler that leaves the decision unconsumed (it only notes it): the resumer's own record
    of handled decisions is then all that keeps it from being called again."""
    with open(os.environ["RESUMER_RECORD"], "a") as out:
        out.write(json.dumps({"approval": ticket.approval_id, "verdict": outcome.status}) + "\n")
