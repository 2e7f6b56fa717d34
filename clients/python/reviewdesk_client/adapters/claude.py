"""Claude Agent SDK / Claude Code adapter: the permission prompt, answered on Review Desk.

Claude Code asks its host before a tool runs (`can_use_tool`, or an MCP tool named by
`--permission-prompt-tool`). This adapter puts that call on the desk, waits for the
reviewer up to `wait_seconds`, verifies the signed decision locally, consumes it and answers:

- approve -> `PermissionResultAllow(updated_input=input)`; edit -> the edited input;
- reject -> `PermissionResultDeny(message=<the reviewer's reason>)`;
- no decision in time ("park") -> `PermissionResultDeny(interrupt=True)` with the approval's
  URL; the turn ends and no process waits. Resume the session later
  (`ClaudeDesk.resume_options()`); when the model makes the same call again (same session,
  tool and exact input) it meets the same approval and, once decided, is allowed once.

What Claude cannot express: there is no execution-time guard (the CLI runs the tool itself
after the answer), and a parked call is bound to (session, tool, exact input), not to the call
id, because the resumed model issues a new `tool_use_id`. Both are said in each call's
description on the desk.

    gate = ClaudeDesk(desk, agent="repo-bot", wait_seconds=600)
    async for message in query(prompt="...", options=gate.options(cwd=...)):
        ...

The Claude Agent SDK and the MCP SDK are imported lazily, inside the functions that need them.
"""

from __future__ import annotations

import argparse
import json
import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from reviewdesk_client import AlreadyConsumed, DecisionExpired, DeskError, VerificationError
from reviewdesk_client.canonical import args_sha256

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from reviewdesk_client import DeskClient, Ticket, Verified

log = logging.getLogger(__name__)

FRAMEWORK = "claude-agent-sdk"
LIMITS_NOTE = (
    "Claude Code: no execution-time guard (the CLI runs the tool itself once this is "
    "answered); a parked call is bound to (session, tool, exact input), single use, "
    "not to its tool_use_id."
)
RESUME_PROMPT = (
    "A reviewer on Review Desk has decided the call you were waiting on. "
    "Make the same tool call again with exactly the same input."
)
ANY_OBJECT = {"type": "object"}


@dataclass(frozen=True)
class Answer:
    """The adapter's answer, before it becomes an SDK result or the CLI's JSON."""

    behavior: str  # "allow" | "deny"
    updated_input: dict | None = None
    message: str = ""
    interrupt: bool = False

    def to_sdk(self) -> Any:
        from claude_agent_sdk import PermissionResultAllow, PermissionResultDeny

        if self.behavior == "allow":
            return PermissionResultAllow(updated_input=self.updated_input)
        return PermissionResultDeny(message=self.message, interrupt=self.interrupt)

    def to_prompt_json(self) -> str:
        """The `--permission-prompt-tool` result the CLI parses (`updatedInput` always sent)."""
        if self.behavior == "allow":
            return json.dumps({"behavior": "allow", "updatedInput": self.updated_input})
        body: dict[str, Any] = {"behavior": "deny", "message": self.message}
        if self.interrupt:
            body["interrupt"] = True
        return json.dumps(body)


def _allow(arguments: dict) -> Answer:
    return Answer("allow", updated_input=arguments)


def _deny(message: str, *, interrupt: bool = False) -> Answer:
    return Answer("deny", message=message, interrupt=interrupt)


class ClaudeDesk:
    """One Claude session's permission prompts, decided on the desk.

    `session_id` is the Claude session (a UUID; one is made if not given): it names the
    desk's external run, `claude:<session_id>`, and is what a parked call is resumed under.
    `gated` limits which tools go to the desk (names, or a predicate); others are allowed
    as asked. `schemas` maps a tool to the JSON Schema its edits are checked against on the
    desk; tools without one get `edit_schema` (default: any object; None turns edits off).
    """

    def __init__(
        self,
        desk: DeskClient,
        *,
        session_id: str | None = None,
        agent: str = "claude-code",
        wait_seconds: float | None = 600.0,
        gated: Sequence[str] | Callable[[str], bool] | None = None,
        schemas: dict[str, dict] | None = None,
        edit_schema: dict | None = ANY_OBJECT,
        reviewers: list[str] | None = None,
        approval_ttl_seconds: int | None = None,
        title: str = "",
    ) -> None:
        self.desk = desk
        self.session_id = session_id or str(uuid.uuid4())
        self.agent = agent
        self.wait_seconds = wait_seconds
        self._gated = gated
        self.schemas = dict(schemas or {})
        self.edit_schema = edit_schema
        self.reviewers = reviewers
        self.approval_ttl_seconds = approval_ttl_seconds
        self.title = title
        self._allowed: dict[str, Verified] = {}  # tool_use_id -> decision it ran under

    @property
    def external_id(self) -> str:
        return f"claude:{self.session_id}"

    # -- SDK wiring ---------------------------------------------------------------------

    def options(self, **kwargs: Any) -> Any:
        """`ClaudeAgentOptions` for a new session under this gate's session id."""
        from claude_agent_sdk import ClaudeAgentOptions

        return ClaudeAgentOptions(
            session_id=self.session_id,
            can_use_tool=self.can_use_tool,
            hooks=self._hooks_with(kwargs),
            **kwargs,
        )

    def resume_options(self, **kwargs: Any) -> Any:
        """`ClaudeAgentOptions` resuming the parked session (prompt it with `RESUME_PROMPT`)."""
        from claude_agent_sdk import ClaudeAgentOptions

        return ClaudeAgentOptions(
            resume=self.session_id, can_use_tool=self.can_use_tool, hooks=self._hooks_with(kwargs), **kwargs
        )

    def _hooks_with(self, kwargs: dict[str, Any]) -> dict[str, list[Any]]:
        hooks = {event: list(matchers) for event, matchers in (kwargs.pop("hooks", None) or {}).items()}
        for event, matchers in self.hooks().items():
            hooks.setdefault(event, []).extend(matchers)
        return hooks

    def hooks(self) -> dict[str, list[Any]]:
        """PostToolUse hooks that report an allowed call's outcome to the desk's ledger."""
        from claude_agent_sdk import HookMatcher

        return {
            "PostToolUse": [HookMatcher(hooks=[self._after_tool])],
            "PostToolUseFailure": [HookMatcher(hooks=[self._after_tool])],
        }

    async def can_use_tool(self, tool_name: str, tool_input: dict[str, Any], context: Any) -> Any:
        """The SDK's `can_use_tool` callback."""
        answer = await self.decide(tool_name, tool_input, context.tool_use_id, title=context.title or "")
        return answer.to_sdk()

    # -- the decision -------------------------------------------------------------------

    async def decide(
        self, tool_name: str, tool_input: dict[str, Any], tool_use_id: str | None, *, title: str = ""
    ) -> Answer:
        """Submit or meet the approval for this call, wait, verify, consume, answer."""
        import anyio.to_thread

        return await anyio.to_thread.run_sync(self.decide_sync, tool_name, tool_input, tool_use_id, title)

    def decide_sync(
        self, tool_name: str, tool_input: dict[str, Any], tool_use_id: str | None, title: str = ""
    ) -> Answer:
        if not self._is_gated(tool_name):
            return _allow(tool_input)
        try:
            return self._decide(tool_name, tool_input, tool_use_id or f"prompt-{uuid.uuid4()}", title)
        except DeskError as exc:
            # No desk, no permission: the turn ends rather than the tool running unreviewed.
            log.warning("Review Desk unavailable for %s: %s", tool_name, exc)
            return _deny(
                f"Review Desk could not be asked about this call ({exc}); it did not run.", interrupt=True
            )

    def _decide(self, tool_name: str, tool_input: dict[str, Any], tool_use_id: str, title: str) -> Answer:
        ticket = self._parked_ticket(tool_name, tool_input) or self._submit(
            tool_name, tool_input, tool_use_id, title
        )
        outcome = (
            self.desk.wait(ticket, self.wait_seconds) if self.wait_seconds else self.desk.outcome(ticket)
        )
        if outcome is None:
            return _deny(
                f"This call waits for a reviewer on Review Desk: {ticket.url} . Stop here and end "
                "the turn; when the session is resumed, make the same call with the same input.",
                interrupt=True,
            )
        if outcome.decision is None:
            # Expired or cancelled: nothing to spend, so the same call later asks anew.
            self._mark_used(ticket)
            return _deny(f"Review Desk: this call was {outcome.status}; it did not run.")
        return self._settle(ticket, outcome.decision, tool_input, tool_use_id)

    def _settle(self, ticket: Ticket, decision: dict, tool_input: dict, tool_use_id: str) -> Answer:
        try:
            verified = self.desk.verify(decision, ticket, current_arguments=tool_input)
            self.desk.consume(verified)
        except (VerificationError, AlreadyConsumed, DecisionExpired) as exc:
            log.warning("Review Desk decision for %s refused: %s", ticket.tool_call_id, exc)
            self._mark_used(ticket)
            _report_quietly(self.desk, ticket, "refused", f"{type(exc).__name__}: {exc}")
            return _deny(f"Refused: the Review Desk decision for this call did not verify ({exc}).")
        self._mark_used(ticket)
        if verified.verdict == "reject":
            return _deny(
                f"A reviewer rejected this call on Review Desk: {verified.reason or 'no reason given'}"
            )
        self._allowed[tool_use_id] = verified
        return _allow(verified.arguments)

    def _submit(self, tool_name: str, tool_input: dict, tool_use_id: str, title: str) -> Ticket:
        schema = self.schemas.get(tool_name, self.edit_schema)
        verdicts = ("approve", "reject", "edit") if schema is not None else ("approve", "reject")
        description = f"{title}\n\n{LIMITS_NOTE}" if title else LIMITS_NOTE
        call = self.desk.call(
            tool_use_id, tool_name, tool_input, schema=schema, verdicts=verdicts, description=description
        )
        (ticket,) = self.desk.submit(
            external_id=self.external_id,
            framework=FRAMEWORK,
            agent=self.agent,
            checkpoint=tool_use_id,
            calls=[call],
            title=(self.title or title or f"Claude session {self.session_id}")[:200],
            resume_policy="per_call",
            reviewers=self.reviewers,
            approval_ttl_seconds=self.approval_ttl_seconds,
        )
        return ticket

    def _parked_ticket(self, tool_name: str, tool_input: dict) -> Ticket | None:
        """An earlier, unused approval of this session for the same tool and exact input."""
        sha = args_sha256(tool_input)
        for ticket in self.desk.store.tickets(self.external_id):
            if ticket.tool == tool_name and ticket.arguments_sha256 == sha and not self._used(ticket):
                return ticket
        return None

    # A ticket is used once its decision was consumed or refused here: a later identical
    # call then asks the desk anew instead of meeting a spent approval.
    def _used(self, ticket: Ticket) -> bool:
        return self.desk.store.get_state(_used_key(ticket)) is not None

    def _mark_used(self, ticket: Ticket) -> None:
        self.desk.store.put_state(_used_key(ticket), "used")

    def _is_gated(self, tool_name: str) -> bool:
        if self._gated is None:
            return True
        if callable(self._gated):
            return bool(self._gated(tool_name))
        return tool_name in self._gated

    async def _after_tool(self, hook_input: dict, tool_use_id: str | None, _context: Any) -> dict:
        verified = self._allowed.pop(tool_use_id or hook_input.get("tool_use_id", ""), None)
        if verified is not None:
            failed = hook_input.get("hook_event_name") == "PostToolUseFailure"
            summary = hook_input.get("error") if failed else _summary(hook_input.get("tool_response"))
            import anyio.to_thread

            await anyio.to_thread.run_sync(
                _report_quietly, self.desk, verified, "failed" if failed else "confirmed", summary or ""
            )
        return {}


def _used_key(ticket: Ticket) -> str:
    return f"claude-used:{ticket.approval_id}"


def _summary(response: Any) -> str:
    text = response if isinstance(response, str) else json.dumps(response, default=str)
    return text[:500]


def _report_quietly(desk: DeskClient, ticket_or_verified: Any, status: str, summary: str) -> None:
    # The report fills the desk's timeline; it must never turn an answer into an exception.
    try:
        desk.report_tool(ticket_or_verified, status, summary[:500])
    except DeskError as exc:
        log.warning("could not report %s to Review Desk: %s", status, exc)


# -- the --permission-prompt-tool route -------------------------------------------------


def prompt_tool_server(gate: ClaudeDesk, name: str = "reviewdesk") -> Any:
    """An MCP server whose `approval_prompt` tool answers the CLI's permission prompts.

    `claude -p --mcp-config desk.json --permission-prompt-tool mcp__reviewdesk__approval_prompt`.
    The CLI bounds the call by its MCP tool timeout, so keep `gate.wait_seconds` below it.
    """
    from mcp.server.mcpserver import MCPServer

    server = MCPServer(name)

    @server.tool(structured_output=False)
    async def approval_prompt(tool_name: str, input: dict[str, Any], tool_use_id: str | None = None) -> str:
        """Ask Review Desk whether Claude Code may run this tool call."""
        answer = await gate.decide(tool_name, input, tool_use_id)
        return answer.to_prompt_json()

    return server


def main(argv: list[str] | None = None) -> None:
    """`python -m reviewdesk_client.adapters.claude --desk URL --session UUID` (stdio MCP)."""
    from reviewdesk_client import DeskClient, SQLiteStore

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--desk", required=True)
    parser.add_argument("--session", default=None, help="Claude session id (a UUID); names the desk run")
    parser.add_argument("--store", default=None, help="SQLite store path, so a parked call survives restarts")
    parser.add_argument("--wait", type=float, default=60.0, help="seconds to wait before parking")
    parser.add_argument("--agent", default="claude-code")
    parser.add_argument("--name", default="reviewdesk")
    args = parser.parse_args(argv)
    store = SQLiteStore(args.store) if args.store else None
    desk = DeskClient(args.desk, store=store)
    gate = ClaudeDesk(desk, session_id=args.session, agent=args.agent, wait_seconds=args.wait)
    prompt_tool_server(gate, args.name).run("stdio")


if __name__ == "__main__":
    main()
