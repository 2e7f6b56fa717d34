"""`DeskClient`: submit a framework's gated calls to the desk, learn their outcome, verify the
signed decision locally, consume it once, report what the tool did.

The order a framework's guard follows is the desk's own gate order: `verify` (local, no I/O),
then `consume` (a compare-and-set at the desk that opens the ledger row), then run the tool,
then `report_tool`. A second replica or a redelivered event loses the compare-and-set and must
not run the tool.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any
from urllib.parse import quote

import httpx

from reviewdesk_client._http import Http
from reviewdesk_client.canonical import args_sha256
from reviewdesk_client.errors import AlreadyConsumed, DecisionExpired, DeskError, VerificationError
from reviewdesk_client.models import SETTLED, VERDICTS, Call, Outcome, Ticket, Verified
from reviewdesk_client.store import MemoryStore, Store
from reviewdesk_client.verify import CLOCK_SKEW, KeyRing, verify_decision

URL_ENV = "REVIEWDESK_URL"
TOKEN_ENV = "REVIEWDESK_TOKEN"
# The desk's caps (contract A1): the context is trimmed to fit, oldest messages first.
CONTEXT_MAX_BYTES = 256 * 1024
TOOL_STATUSES = ("confirmed", "failed", "refused")
RUN_STATUSES = ("succeeded", "failed", "cancelled")


class DeskClient:
    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        keys: KeyRing | None = None,
        store: Store | None = None,
        http_client: httpx.Client | None = None,
        *,
        skew: timedelta = CLOCK_SKEW,
        trusted_tools: Iterable[str] = (),
    ) -> None:
        """`url` defaults to $REVIEWDESK_URL, `token` to $REVIEWDESK_TOKEN, `keys` to
        `KeyRing.from_env()` ($REVIEWDESK_KEYS / $REVIEWDESK_KEYS_FILE), `store` to a MemoryStore.
        `trusted_tools`: the tools whose output is your own systems' truth (a lookup in your own
        database); the desk treats every other tool's output as untrusted and warns when an
        argument came only from it."""
        url = url or os.environ.get(URL_ENV)
        if not url:
            raise ValueError(f"the desk's URL: pass url= or set {URL_ENV}")
        self.url = url.rstrip("/")
        self.keys = keys if keys is not None else KeyRing.from_env()
        self.store: Store = store if store is not None else MemoryStore()
        self.skew = skew
        self.trusted_tools = tuple(trusted_tools)
        self.http = Http(self.url, token if token is not None else os.environ.get(TOKEN_ENV), http_client)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> DeskClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- submit ------------------------------------------------------------------------------
    def call(
        self,
        tool_call_id: str,
        tool: str,
        arguments: Any,
        *,
        schema: Mapping[str, Any] | None = None,
        verdicts: Sequence[str] = VERDICTS,
        description: str = "",
        reason: str = "",
        preview: str = "",
        reviewers: Sequence[str] | None = None,
        required_approvals: int | None = None,
    ) -> Call:
        """One gated call, its arguments hashed here (RFC 8785, SHA-256) as the framework holds them."""
        unknown = set(verdicts) - set(VERDICTS)
        if unknown:
            raise ValueError(f"verdicts must be among {VERDICTS}; got {sorted(unknown)}")
        return Call(
            tool_call_id=tool_call_id,
            tool=tool,
            arguments=arguments,
            arguments_sha256=args_sha256(arguments),
            schema=dict(schema) if schema is not None else None,
            verdicts=tuple(verdicts),
            description=description,
            reason=reason,
            preview=preview,
            reviewers=tuple(reviewers) if reviewers is not None else None,
            required_approvals=required_approvals,
        )

    def submit(
        self,
        *,
        external_id: str,
        framework: str,
        agent: str,
        checkpoint: str,
        calls: Sequence[Call],
        title: str = "",
        input: str = "",
        context: Iterable[Mapping[str, Any]] = (),
        resume_policy: str = "per_call",
        reviewers: Sequence[str] | None = None,
        approval_ttl_seconds: int | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> list[Ticket]:
        """Submit the calls of one pause; the tickets are in the store before this returns.

        Idempotent: the same (external_id, tool_call_id) with the same arguments meets the
        approval made the first time, whatever its status; other arguments → DeskError 409."""
        if resume_policy not in ("per_call", "all_or_nothing"):
            raise ValueError("resume_policy is per_call or all_or_nothing")
        body: dict[str, Any] = {
            "run": {
                "external_id": external_id,
                "framework": framework,
                "agent": agent,
                "title": title,
                "input": input,
                "metadata": dict(metadata or {}),
            },
            "checkpoint": checkpoint,
            "resume_policy": resume_policy,
            "calls": [call.body() for call in calls],
            "context": context_body(context, trusted_tools=self.trusted_tools),
        }
        if reviewers is not None:
            body["reviewers"] = list(reviewers)
        if approval_ttl_seconds is not None:
            body["approval_ttl_seconds"] = approval_ttl_seconds
        answer = self.http.post("/api/v1/external/approvals", body)
        tickets = tickets_from(answer, calls, external_id=external_id, checkpoint=checkpoint)
        self.store.put_tickets(tickets)
        return tickets

    # --- outcome -------------------------------------------------------------------------------
    def approval(self, ticket: Ticket | str) -> dict[str, Any]:
        """The approval as the desk serves it now (`GET /api/v1/approvals/{id}`)."""
        return self.http.get(f"/api/v1/approvals/{_approval_id(ticket)}")

    def outcome(self, ticket: Ticket | str) -> Outcome | None:
        """None while the approval is pending; else its status and settling decision (unverified)."""
        return outcome_of(self.approval(ticket))

    def wait(
        self, ticket: Ticket, timeout: float, *, via: str = "poll", interval: float = 0.5
    ) -> Outcome | None:
        """The outcome once the approval leaves `pending`, or None after `timeout` seconds.
        `via="poll"` reads the approval every `interval` seconds; `via="sse"` follows the run's
        event stream (`Last-Event-ID` on reconnect) and reads nothing else."""
        if via == "poll":
            return self._wait_polling(ticket, timeout, interval)
        if via == "sse":
            from reviewdesk_client.delivery import wait_sse

            return wait_sse(self, ticket, timeout)
        raise ValueError("via is 'poll' or 'sse'")

    def _wait_polling(self, ticket: Ticket, timeout: float, interval: float) -> Outcome | None:
        deadline = time.monotonic() + timeout
        while True:
            outcome = self.outcome(ticket)
            if outcome is not None:
                return outcome
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            time.sleep(min(interval, left))

    def approvals(self, **filters: Any) -> list[dict[str, Any]]:
        """Every approval this token may see that matches `filters` (the list's query parameters:
        run, status, consumed, kind, tool, ...), all pages."""
        params = {k: _query_value(v) for k, v in filters.items() if v is not None}
        page = self.http.get("/api/v1/approvals", params=params)
        found = list(page["results"])
        while page.get("next"):
            page = self.http.get(page["next"])
            found.extend(page["results"])
        return found

    # --- verify, consume, report ---------------------------------------------------------------
    def verify(self, decision: Mapping[str, Any], ticket: Ticket, *, current_arguments: Any) -> Verified:
        """Every check of a decision, locally (verify.verify_decision): raises VerificationError.
        `current_arguments`: the call's arguments read from the framework's restored state now."""
        return verify_decision(
            decision,
            ticket,
            current_arguments=current_arguments,
            keys=self.keys,
            consumed=self.store.is_consumed,
            skew=self.skew,
        )

    def consume(self, verified: Verified) -> None:
        """Spend the decision, once, at the desk (which opens the ledger row for an approve or an
        edit) and here. Raises AlreadyConsumed or DecisionExpired; the tool must not run then."""
        if not self.store.claim_nonce(verified.nonce):
            raise AlreadyConsumed(409, "consumed", "this decision was consumed here before")
        try:
            self.http.post(
                f"/api/v1/approvals/{verified.approval_id}/consume",
                {"decision_id": verified.decision_id, "nonce": verified.nonce},
            )
        except DeskError as error:
            if error.status == 409 and error.code == "consumed":
                raise AlreadyConsumed(error.status, error.code, error.detail, error.body) from None
            if error.status == 410:
                raise DecisionExpired(error.status, error.code, error.detail, error.body) from None
            # Not spent at the desk (refused, or never reached it): this client may try again.
            self.store.release_nonce(verified.nonce)
            raise

    def guard(self, verified: Verified, arguments: Any) -> None:
        """What a tool wrapper runs right before the tool: the arguments about to run must be the
        verified ones, then `consume`. Raises VerificationError, AlreadyConsumed, DecisionExpired."""
        if not verified.approved:
            raise VerificationError("verdict", f"a {verified.verdict} does not let the tool run")
        if args_sha256(arguments) != args_sha256(verified.arguments):
            raise VerificationError(
                "arguments_changed", "the arguments about to run are not the verified ones"
            )
        self.consume(verified)

    def report_tool(
        self, verified_or_ticket: Verified | Ticket, status: str, summary: str = ""
    ) -> dict[str, Any]:
        """The tool's outcome for the desk's ledger and timeline: confirmed, failed or refused."""
        if status not in TOOL_STATUSES:
            raise ValueError(f"status is one of {TOOL_STATUSES}")
        event = {
            "type": "tool.finished",
            "tool_call_id": verified_or_ticket.tool_call_id,
            "status": status,
            "summary": summary,
        }
        return self._report(verified_or_ticket.run_id, [event])

    def report_run(self, external_id_or_run_id: str, status: str, output: str = "") -> dict[str, Any]:
        """The framework's run ended: succeeded, failed or cancelled. An external id is looked up
        among this store's tickets; anything else is taken as the desk's run id."""
        if status not in RUN_STATUSES:
            raise ValueError(f"status is one of {RUN_STATUSES}")
        tickets = self.store.tickets(external_id_or_run_id)
        run_id = tickets[-1].run_id if tickets else external_id_or_run_id
        return self._report(run_id, [{"type": "run.finished", "status": status, "output": output}])

    def _report(self, run_id: str, events: list[dict[str, Any]]) -> dict[str, Any]:
        if not run_id:
            raise ValueError("no desk run id to report to")
        return self.http.post(f"/api/v1/runs/{run_id}/report", {"events": events})

    def cancel_run(self, run_id: str) -> dict[str, Any]:
        """Cancel the desk's run (its pending approvals are cancelled with it)."""
        return self.http.post(f"/api/v1/runs/{run_id}/cancel", {})

    # --- keys ------------------------------------------------------------------------------------
    def fetch_keys(self) -> KeyRing:
        """The desk's published keys (`GET /api/v1/keys`): trust on first use. Whoever answers as
        the desk the first time chooses the keys; pin them in REVIEWDESK_KEYS for production."""
        warnings.warn(
            "trusting the desk's keys on first use: pin them in REVIEWDESK_KEYS or REVIEWDESK_KEYS_FILE",
            stacklevel=2,
        )
        return KeyRing.from_keys_response(self.http.get("/api/v1/keys", auth=False))

    def pin_fetched_keys(self) -> KeyRing:
        """`fetch_keys` and trust them from now on (this object only)."""
        self.keys = self.keys.merged(self.fetch_keys())
        return self.keys


def context_body(
    messages: Iterable[Mapping[str, Any]], *, trusted_tools: Sequence[str] = ()
) -> dict[str, Any]:
    """The last messages that fit the desk's context cap; `truncated` when some were left out.
    The desk traces each call's arguments over them (a tool message may name its tool)."""
    kept: list[dict[str, Any]] = []
    size = 0
    given = [dict(m) for m in messages]
    for message in reversed(given):
        size += len(json.dumps(message, ensure_ascii=False).encode()) + 1
        if size > CONTEXT_MAX_BYTES - 64:
            break
        kept.append(message)
    kept.reverse()
    body: dict[str, Any] = {"messages": kept, "truncated": len(kept) < len(given)}
    if trusted_tools:
        body["trusted_tools"] = list(trusted_tools)
    return body


def tickets_from(
    answer: Mapping[str, Any], calls: Sequence[Call], *, external_id: str, checkpoint: str
) -> list[Ticket]:
    """The tickets of a submit's answer, each with the hash computed here (never the desk's)."""
    by_id = {call.tool_call_id: call for call in calls}
    tickets = []
    for approval in answer["approvals"]:
        call = by_id[approval["tool_call_id"]]
        tickets.append(
            Ticket(
                approval_id=approval["id"],
                run_id=answer["run"]["id"],
                # A call met again keeps the checkpoint it was first raised at: its decision
                # signs that one, not this submit's.
                checkpoint_id=approval.get("checkpoint_id", answer["checkpoint_id"]),
                audience=answer["audience"],
                external_id=external_id,
                external_checkpoint=approval.get("external_checkpoint", checkpoint),
                tool_call_id=call.tool_call_id,
                tool=call.tool,
                arguments_sha256=call.arguments_sha256,
                # What the desk kept (an edit without a schema is dropped), within what was asked.
                verdicts=tuple(v for v in approval.get("verdicts", call.verdicts) if v in call.verdicts),
                url=approval.get("url", ""),
                status=approval.get("status", "pending"),
            )
        )
    return tickets


def outcome_of(approval: Mapping[str, Any]) -> Outcome | None:
    status = approval.get("status")
    if status not in SETTLED:
        return None
    return Outcome(status=status, decision=approval.get("decision"), approval=dict(approval))


def _approval_id(ticket: Ticket | str) -> str:
    return quote(ticket.approval_id if isinstance(ticket, Ticket) else ticket, safe="")


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple | set):
        return ",".join(str(v) for v in value)
    return str(value)


class AsyncDeskClient:
    """`DeskClient` for async frameworks: the same methods, the ones that reach the desk awaited
    (each runs the blocking call in a thread, so the event loop is never held while a request is
    in flight). `call` and `verify` do no I/O and stay plain calls."""

    def __init__(self, *args: Any, desk: DeskClient | None = None, **kwargs: Any) -> None:
        self.desk = desk if desk is not None else DeskClient(*args, **kwargs)

    @property
    def store(self) -> Store:
        return self.desk.store

    @property
    def keys(self) -> KeyRing:
        return self.desk.keys

    def call(self, *args: Any, **kwargs: Any) -> Call:
        return self.desk.call(*args, **kwargs)

    def verify(self, decision: Mapping[str, Any], ticket: Ticket, *, current_arguments: Any) -> Verified:
        return self.desk.verify(decision, ticket, current_arguments=current_arguments)

    async def submit(self, **kwargs: Any) -> list[Ticket]:
        return await _in_thread(self.desk.submit, **kwargs)

    async def approval(self, ticket: Ticket | str) -> dict[str, Any]:
        return await _in_thread(self.desk.approval, ticket)

    async def outcome(self, ticket: Ticket | str) -> Outcome | None:
        return await _in_thread(self.desk.outcome, ticket)

    async def wait(
        self, ticket: Ticket, timeout: float, *, via: str = "poll", interval: float = 0.5
    ) -> Outcome | None:
        return await _in_thread(self.desk.wait, ticket, timeout, via=via, interval=interval)

    async def approvals(self, **filters: Any) -> list[dict[str, Any]]:
        return await _in_thread(self.desk.approvals, **filters)

    async def consume(self, verified: Verified) -> None:
        await _in_thread(self.desk.consume, verified)

    async def guard(self, verified: Verified, arguments: Any) -> None:
        await _in_thread(self.desk.guard, verified, arguments)

    async def report_tool(
        self, verified_or_ticket: Verified | Ticket, status: str, summary: str = ""
    ) -> dict[str, Any]:
        return await _in_thread(self.desk.report_tool, verified_or_ticket, status, summary)

    async def report_run(self, external_id_or_run_id: str, status: str, output: str = "") -> dict[str, Any]:
        return await _in_thread(self.desk.report_run, external_id_or_run_id, status, output)

    async def cancel_run(self, run_id: str) -> dict[str, Any]:
        return await _in_thread(self.desk.cancel_run, run_id)

    def close(self) -> None:
        self.desk.close()


async def _in_thread(function: Any, *args: Any, **kwargs: Any) -> Any:
    return await asyncio.to_thread(function, *args, **kwargs)
