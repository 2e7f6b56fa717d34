"""One process per deployment that resumes paused runs when their calls are decided.

    python -m reviewdesk_client.resumer --desk URL --store PATH --handler pkg.mod:function [--once]

On start it lists the approvals this token submitted that were decided and not consumed (a
decision made while nothing was listening is not lost), then follows the desk's event stream
(`--via sse`, resumed with `Last-Event-ID` from the position kept in the store) or polls
(`--via poll`). Each settled approval whose ticket is in the store goes to the handler once:

    def handler(desk: DeskClient, ticket: Ticket, outcome: Outcome) -> None

The handler restores the framework's state from the store, calls `desk.verify(outcome.decision,
ticket, current_arguments=...)`, consumes, runs the tool and reports. A handler that raises is
tried again at the next event or start; one that returns is not called again for that decision
(the store remembers it, and the desk's single-use consume refuses a second run anyway).
The token comes from REVIEWDESK_TOKEN, the pinned keys from REVIEWDESK_KEYS / REVIEWDESK_KEYS_FILE.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from reviewdesk_client.client import DeskClient, outcome_of
from reviewdesk_client.delivery import EventStream, decided_unconsumed
from reviewdesk_client.errors import DeskError
from reviewdesk_client.models import Outcome, Ticket
from reviewdesk_client.store import SQLiteStore

Handler = Callable[[DeskClient, Ticket, Outcome], Any]
CURSOR_KEY = "reviewdesk_client.resumer:last_seq"
log = logging.getLogger("reviewdesk_client.resumer")


class Resumer:
    def __init__(self, desk: DeskClient, handler: Handler) -> None:
        self.desk = desk
        self.handler = handler
        self.handled = 0

    def catch_up(self) -> int:
        """Hand every decided, unconsumed approval of this store's tickets to the handler."""
        before = self.handled
        for approval in decided_unconsumed(self.desk):
            self.dispatch(approval, fresh=True)
        return self.handled - before

    def dispatch(self, approval: Mapping[str, Any], *, fresh: bool = False) -> bool:
        """Call the handler for this settled approval if it is ours and not handled yet."""
        ticket = self.desk.store.ticket_by_approval(str(approval.get("id")))
        if ticket is None or outcome_of(approval) is None:
            return False
        if not fresh:  # an event tells what was true then: read what is true now
            approval = self.desk.approval(ticket)
        outcome = outcome_of(approval)
        if outcome is None or (outcome.decision or {}).get("consumed_at"):
            return False
        key = (outcome.decision or {}).get("id") or f"{ticket.approval_id}:{outcome.status}"
        if not self.desk.store.claim_handled(key):
            return False
        try:
            self.handler(self.desk, ticket, outcome)
        except Exception:
            self.desk.store.release_handled(key)
            log.exception("the handler failed for approval %s; it is tried again later", ticket.approval_id)
            return False
        self.handled += 1
        return True

    def follow(self, stop: threading.Event) -> None:
        """Follow the desk's stream from the stored position until `stop` is set."""
        cursor = self.desk.store.get_state(CURSOR_KEY)
        stream = EventStream(self.desk, int(cursor) if cursor else None, stop=stop)
        for event in stream:
            if event["type"].startswith("approval.") and event.get("data"):
                try:
                    self.dispatch(event["data"])
                except DeskError:
                    log.exception("reading approval %s failed", event["data"].get("id"))
                    continue
            self.desk.store.put_state(CURSOR_KEY, str(stream.last_seq))

    def poll(self, stop: threading.Event, interval: float) -> None:
        while not stop.is_set():
            try:
                self.catch_up()
            except DeskError:
                log.exception("listing decided approvals failed")
            stop.wait(interval)

    def run(
        self,
        *,
        once: bool = False,
        via: str = "sse",
        interval: float = 2.0,
        stop: threading.Event | None = None,
    ) -> int:
        stop = stop or threading.Event()
        self.catch_up()
        if not once:
            if via == "sse":
                self.follow(stop)
            else:
                self.poll(stop, interval)
        return self.handled


def load_handler(spec: str) -> Handler:
    """`pkg.module:function` → the function."""
    module, _, name = spec.partition(":")
    if not module or not name:
        raise ValueError("--handler is pkg.module:function")
    target: Any = importlib.import_module(module)
    for part in name.split("."):
        target = getattr(target, part)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m reviewdesk_client.resumer", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--desk", default=os.environ.get("REVIEWDESK_URL"), help="the desk's URL (REVIEWDESK_URL)"
    )
    parser.add_argument("--store", required=True, help="the SQLite store the agent's process writes")
    parser.add_argument("--handler", required=True, help="pkg.module:function called per settled approval")
    parser.add_argument("--once", action="store_true", help="catch up and exit")
    parser.add_argument("--via", choices=("sse", "poll"), default="sse")
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between polls (--via poll)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if not args.desk:
        parser.error("--desk or REVIEWDESK_URL is required")
    sys.path.append(os.getcwd())  # the handler's module may sit beside; never before installed packages
    handler = load_handler(args.handler)
    desk = DeskClient(args.desk, store=SQLiteStore(args.store))
    if not len(desk.keys):
        log.warning("no pinned keys (REVIEWDESK_KEYS / REVIEWDESK_KEYS_FILE): every decision will be refused")
    started = time.monotonic()
    try:
        handled = Resumer(desk, handler).run(once=args.once, via=args.via, interval=args.interval)
    except KeyboardInterrupt:
        return 0
    log.info("handled %d decision(s) in %.1fs", handled, time.monotonic() - started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
