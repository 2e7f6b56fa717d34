"""The gated call: submit it to the desk, wait for the decision while keeping the client informed,
verify it locally, consume it, then send the call upstream exactly once.

One external run per gateway (`external_id` "mcp:NAME"), one approval and one external
checkpoint per call. The checkpoint is "<tool_call_id>@<digest of the tool's pinned definition>",
so the signed decision binds the definition the reviewer saw: a call decided under one definition
never runs under another.

An identical call made again (same tool, same definition, same arguments) meets the approval of
the first while that approval is open: the store maps the call to the tool call id the gateway
minted for it, until the decision is used or the approval ends.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import anyio.to_thread
import httpx
import mcp_types as types
from mcp.server.context import ServerRequestContext

from reviewdesk_client import (
    AlreadyConsumed,
    DecisionExpired,
    DeskClient,
    DeskError,
    SQLiteStore,
    VerificationError,
)
from reviewdesk_client.canonical import args_sha256, jcs
from reviewdesk_client.mcp_gateway.proxy import UpstreamCall, error_result

if TYPE_CHECKING:
    from reviewdesk_client import Outcome, Ticket, Verified
    from reviewdesk_client.mcp_gateway.cli import Options

logger = logging.getLogger("reviewdesk_client.mcp_gateway")

FRAMEWORK = "mcp"
# The idempotency key travels upstream in the call's `_meta`, as the desk's own MCP support sends it.
IDEMPOTENCY_META_KEY = "io.reviewdesk/idempotency-key"
# What the gateway adds to its own results' `_meta`: the approval's id, status and page.
APPROVAL_META_KEY = "io.reviewdesk/approval"
# The client hears from a waiting call at least this often (progress notifications).
PROGRESS_EVERY_SECONDS = 5.0
SUMMARY_CHARS = 500

T = TypeVar("T")


@dataclass(frozen=True)
class Pending:
    """A call whose approval is still open, as the gateway remembers it between tries."""

    ticket: Ticket
    key: str


def call_key(name: str, tool: str, digest: str, arguments: Any) -> str:
    """The store's key for "this call": an identical call made again meets the same approval."""
    return f"mcp-gateway:{name}:{tool}:{digest}:{args_sha256(arguments)}"


class DeskGate:
    """The `Gate` of a gateway with a desk. Blocking desk calls run in worker threads."""

    def __init__(self, name: str, wait_seconds: float, desk_factory: Callable[[], DeskClient]) -> None:
        self.name = name
        self.external_id = f"mcp:{name}"
        # The run new calls go to, once the first one ended (`_next_external_id`).
        self._run_key = f"mcp-gateway:{name}:run"
        self.wait_seconds = wait_seconds
        self._desk_factory = desk_factory
        self._desk: DeskClient | None = None
        self._locks: dict[str, anyio.Lock] = {}

    @classmethod
    def open(cls, options: Options) -> DeskGate:
        assert options.desk is not None
        url, store_path = options.desk, options.store
        return cls(options.name, options.wait_seconds, lambda: DeskClient(url, store=SQLiteStore(store_path)))

    @property
    def desk(self) -> DeskClient:
        # Made at the first gated call: a gateway whose calls are all ungated never needs the desk.
        if self._desk is None:
            self._desk = self._desk_factory()
        return self._desk

    def close(self) -> None:
        if self._desk is not None:
            self._desk.close()

    async def _io(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await anyio.to_thread.run_sync(lambda: function(*args, **kwargs))

    async def run(self, ctx: ServerRequestContext[Any, Any], call: UpstreamCall) -> types.CallToolResult:
        key = call_key(self.name, call.tool, call.digest, call.arguments)
        # Identical calls at once are taken one after the other: one approval for them, and its
        # decision used once (the next one then asks anew).
        lock = self._locks.setdefault(key, anyio.Lock())
        try:
            async with lock:
                return await self._run_locked(ctx, call, key)
        finally:
            if not lock.locked() and lock.statistics().tasks_waiting == 0:
                self._locks.pop(key, None)

    async def _run_locked(
        self, ctx: ServerRequestContext[Any, Any], call: UpstreamCall, key: str
    ) -> types.CallToolResult:
        # Nothing was sent upstream when the desk fails: `_settle` sends last and reports
        # without raising.
        try:
            pending = await self._io(self._pending, key, call)
            outcome = await self._await_outcome(ctx, pending.ticket)
            if outcome is None:
                return _waiting(pending.ticket)
            return await self._settle(pending, outcome, call)
        except (DeskError, httpx.HTTPError) as exc:
            logger.error("the desk failed on the call to %s: %s", call.tool, exc)
            return error_result(
                f"Review Desk could not be reached or refused the call; it was not sent: {exc}"
            )

    # --- finding or raising the approval --------------------------------------------------

    def _pending(self, key: str, call: UpstreamCall) -> Pending:
        """The open approval of this exact call, or a new one. Which run and tool call id the call
        went to is stored before the submit: a submit cut off is sent again under the same ids
        (idempotent on the desk)."""
        store = self.desk.store
        saved = store.get_state(key)
        if saved is not None:
            ref = json.loads(saved)
            external_id, tool_call_id = ref["external_id"], ref["tool_call_id"]
            ticket = store.ticket(external_id, tool_call_id)
            if ticket is not None:
                return Pending(self._with_url(ticket), key)
        else:
            external_id, tool_call_id = self._external_id(), f"mcp-{uuid.uuid4().hex}"
            store.put_state(key, json.dumps({"external_id": external_id, "tool_call_id": tool_call_id}))
        try:
            ticket = self._submit(external_id, tool_call_id, call)
        except DeskError as error:
            if (error.status, error.code) != (409, "ended"):
                raise
            # The gateway's run was cancelled on the desk (its pending calls with it): later
            # calls are new requests, each still decided by a reviewer, in a run of their own.
            external_id = self._next_external_id(external_id)
            store.put_state(key, json.dumps({"external_id": external_id, "tool_call_id": tool_call_id}))
            ticket = self._submit(external_id, tool_call_id, call)
        return Pending(self._with_url(ticket), key)

    def _external_id(self) -> str:
        return self.desk.store.get_state(self._run_key) or self.external_id

    def _next_external_id(self, ended: str) -> str:
        current = self._external_id()
        if current == ended:
            generation = int(ended.rsplit(":", 1)[1]) + 1 if ended != self.external_id else 2
            current = f"{self.external_id}:{generation}"
            self.desk.store.put_state(self._run_key, current)
            logger.warning("the desk's run %s has ended: new calls go to the run %s", ended, current)
        return current

    def _with_url(self, ticket: Ticket) -> Ticket:
        """The approval's page as the desk named it, else where the desk keeps it."""
        if ticket.url:
            return ticket
        return dataclasses.replace(ticket, url=f"{self.desk.url}/approvals/{ticket.approval_id}/")

    def _submit(self, external_id: str, tool_call_id: str, call: UpstreamCall) -> Ticket:
        definition = call.definition
        desk_call = self.desk.call(
            tool_call_id,
            call.tool,
            call.arguments,
            schema=definition.get("inputSchema") or {"type": "object"},
            verdicts=("approve", "reject", "edit"),
            description=definition.get("description") or "",
        )
        (ticket,) = self.desk.submit(
            external_id=external_id,
            framework=FRAMEWORK,
            agent=self.name,
            checkpoint=f"{tool_call_id}@{call.digest}",
            calls=[desk_call],
            title=f"MCP gateway {self.name}",
        )
        logger.info("%s waits for a reviewer: approval %s", call.tool, ticket.approval_id)
        return ticket

    # --- waiting ----------------------------------------------------------------------------

    async def _await_outcome(self, ctx: ServerRequestContext[Any, Any], ticket: Ticket) -> Outcome | None:
        """The decision, or None if none came within the gateway's wait. The client hears where
        the approval is at once and then every few seconds (when it asked for progress)."""
        started = time.monotonic()
        outcome = await self._io(self.desk.outcome, ticket)
        while outcome is None:
            elapsed = time.monotonic() - started
            remaining = self.wait_seconds - elapsed
            if remaining <= 0:
                return None
            await _progress(ctx, elapsed, self.wait_seconds, f"waiting for a reviewer: {ticket.url}")
            outcome = await self._io(self.desk.wait, ticket, min(PROGRESS_EVERY_SECONDS, remaining))
        return outcome

    # --- acting on the decision ---------------------------------------------------------------

    async def _settle(self, pending: Pending, outcome: Outcome, call: UpstreamCall) -> types.CallToolResult:
        ticket = pending.ticket
        if outcome.status in ("expired", "cancelled") or outcome.decision is None:
            await self._io(self.desk.store.delete_state, pending.key)  # a new call asks anew
            return error_result(
                f"the approval of this call {_ended(outcome.status)} on the desk; the call was not sent "
                f"(call again to ask a reviewer anew): {ticket.url}",
                _meta(ticket, outcome.status),
            )
        try:
            verified = await self._io(
                self.desk.verify, outcome.decision, ticket, current_arguments=call.arguments
            )
        except VerificationError as exc:
            logger.error("refused the desk's decision on %s: %s", ticket.url, exc)
            return error_result(
                f"the desk's decision on this call failed verification and was refused; the call was "
                f"not sent: {exc}",
                _meta(ticket, "refused"),
            )
        if not verified.approved:
            return await self._rejected(pending, verified)
        return await self._run_approved(pending, verified, call)

    async def _rejected(self, pending: Pending, verified: Verified) -> types.CallToolResult:
        with contextlib.suppress(DeskError, httpx.HTTPError):
            await self._io(self.desk.consume, verified)  # the desk learns the reject was delivered
        await self._io(self.desk.store.delete_state, pending.key)
        reason = verified.reason or "no reason given"
        return error_result(
            f"a reviewer ({verified.reviewer}) rejected this call: {reason}",
            _meta(pending.ticket, "rejected"),
        )

    async def _run_approved(
        self, pending: Pending, verified: Verified, call: UpstreamCall
    ) -> types.CallToolResult:
        ticket = pending.ticket
        # The reviewer decided under the pinned definition bound into the checkpoint: the
        # upstream must still serve exactly that one.
        if (
            ticket.external_checkpoint != f"{ticket.tool_call_id}@{call.digest}"
            or (await call.served_digest()) != call.digest
        ):
            return error_result(
                f"the MCP tool {call.tool}'s definition changed since this call was decided; "
                "the call was not sent",
                _meta(ticket, "refused"),
            )
        arguments = _json_copy(verified.arguments)  # the verified arguments, nothing shared
        try:
            # The arguments about to be sent are the verified ones; then the single-use consume.
            await self._io(self.desk.guard, verified, arguments)
        except AlreadyConsumed:
            await self._io(self.desk.store.delete_state, pending.key)
            return error_result(
                "this call's decision was already used; the call is not sent again",
                _meta(ticket, "consumed"),
            )
        except DecisionExpired:
            await self._io(self.desk.store.delete_state, pending.key)
            return error_result(
                f"the decision on this call expired before it could run; the call was not sent: {ticket.url}",
                _meta(ticket, "expired"),
            )
        except VerificationError as exc:
            return error_result(f"the call was not sent: {exc}", _meta(ticket, "refused"))
        # Used: the same call made again asks anew from here on.
        await self._io(self.desk.store.delete_state, pending.key)
        meta = {IDEMPOTENCY_META_KEY: f"{ticket.run_id}:{ticket.tool_call_id}"}
        try:
            result = await call.send(arguments, meta)
        except Exception as exc:
            # It may have reached the upstream: the desk's ledger row stays pending and goes to a
            # human as unknown; never sent again from here.
            logger.exception("the call %s may have reached the upstream", ticket.url)
            return error_result(
                f"the call was sent upstream and its outcome is unknown ({type(exc).__name__}); "
                f"a human reconciles it on the desk: {ticket.url}",
                _meta(ticket, "unknown"),
            )
        await self._report(verified, result)
        return result

    async def _report(self, verified: Verified, result: types.CallToolResult) -> None:
        status = "failed" if result.is_error else "confirmed"
        summary = _text_of(result)[:SUMMARY_CHARS]
        try:
            await self._io(self.desk.report_tool, verified, status, summary)
        except Exception:
            # The tool ran; the desk learns of it from the sweep (unknown, a human) if not now.
            logger.exception("could not report the call's outcome to the desk")


def _json_copy(value: Any) -> Any:
    return json.loads(jcs(value))


def _ended(status: str) -> str:
    return {"expired": "expired", "cancelled": "was cancelled"}.get(status, f"ended ({status})")


def _meta(ticket: Ticket, status: str) -> dict[str, Any]:
    return {APPROVAL_META_KEY: {"id": ticket.approval_id, "status": status, "url": ticket.url}}


def _waiting(ticket: Ticket) -> types.CallToolResult:
    """No decision yet: the call was not sent. Calling again with the same arguments meets the
    same approval (and runs once it is approved)."""
    return error_result(
        f"this call waits for a reviewer on Review Desk and was not sent: {ticket.url} . "
        "Call the tool again with the same arguments once it is decided.",
        _meta(ticket, "pending"),
    )


def _text_of(result: types.CallToolResult) -> str:
    return "\n".join(getattr(block, "text", "") or "" for block in result.content or ())


async def _progress(ctx: ServerRequestContext[Any, Any], elapsed: float, total: float, message: str) -> None:
    """A progress notification when the client asked for progress (a no-op otherwise)."""
    try:
        await ctx.session.report_progress(round(elapsed, 1), total, message)
    except Exception:
        logger.debug("could not send progress", exc_info=True)
