"""MCP servers' tools and their pins.

    manage.py mcp_tools                   every server's tools: pin state, pinned digest (short)
    manage.py mcp_tools --accept SERVER   show each changed or gone tool of SERVER (what changed,
                                          line by line), then accept what it serves now (as the
                                          workers last listed it), once confirmed: asked on a
                                          terminal, `--yes` in a script
    manage.py mcp_tools --accept SERVER --tool NAME=DIGEST_PREFIX [--tool ...]
                                          accept only the named tools, each only if the served
                                          digest starts with DIGEST_PREFIX (8 or more hex
                                          characters; `NAME=gone` for a tool no longer served)

Only a change a worker recorded and sealed is accepted: one whose seal does not verify (written
into the database by someone else) is shown as refused and left as it is, as is a tool whose
name the desk refuses. With `--tool`, all the named tools are accepted or none.

Accepting is audited as the command's (actor "system"), as `trust` and `create_token` are, and
signed with the desk's key: run it where the web tier runs.
"""

from __future__ import annotations

import sys

from django.core.management.base import BaseCommand, CommandError

from agents.mcp import tool_name_acceptable
from reviewdesk.lib.errors import DeskError
from reviewdesk.mcp.models import PendingState
from reviewdesk.mcp.seals import pending_verifies
from reviewdesk.mcp.selectors import PinRow, pin_rows
from reviewdesk.mcp.services import server_accept

MIN_PREFIX = 8  # hex characters of a digest named with --tool


class Command(BaseCommand):
    help = "List MCP servers' tools and their pin state; --accept SERVER accepts what it serves now."

    def add_arguments(self, parser):
        parser.add_argument(
            "--accept", metavar="SERVER", default=None, help="accept SERVER's served definitions"
        )
        parser.add_argument(
            "--tool",
            metavar="NAME=DIGEST_PREFIX",
            action="append",
            default=None,
            help="with --accept: accept only this tool, served with a digest starting so ('gone': no longer served)",
        )
        parser.add_argument(
            "--yes", action="store_true", help="with --accept and no --tool: accept without asking"
        )

    def handle(self, *args, accept: str | None = None, tool=None, yes: bool = False, **options):
        if accept is not None:
            self._accept(accept, tool or [], yes)
            return
        if tool:
            raise CommandError("--tool goes with --accept SERVER")
        rows = pin_rows()
        if not rows:
            self.stdout.write("no MCP tools seen yet")
        for row in rows:
            line = f"{row.pin.server}\t{row.pin.tool}\t{row.state}\t{row.short_digest}"
            if row.pin.pending_digest:
                line += f" -> {row.pending_short_digest}"
            if row.pin.definition is None:
                line += f"\t({row.pin.pending_reason})"
            elif not row.signed:
                line += "\t(its signature does not verify: refused)"
            self.stdout.write(line)

    def _accept(self, server: str, named: list[str], yes: bool) -> None:
        rows = pin_rows(server)
        if not rows:
            raise CommandError(f"no pinned tools on server {server!r}")
        pending = {row.pin.tool: row for row in rows if row.pin.pending_state}
        if not pending:
            self.stdout.write(f"{server}: every tool is served as pinned; nothing to accept")
            return
        if named:
            digests = {}
            for item in named:
                name, _, prefix = item.partition("=")
                row = pending.get(name)
                if row is None:
                    raise CommandError(f"{server}/{name} has no change to accept")
                digests[name] = _digest_named(server, row, prefix)
                self._show(row)
        else:
            for row in pending.values():
                self._show(row)
            digests = {name: row.pin.pending_digest for name, row in pending.items() if _acceptable(row)}
            if not digests:
                raise CommandError(f"{server}: no change here can be accepted")
            if not yes:
                self._confirm(server, sorted(digests))
        try:
            accepted = server_accept(server=server, digests=digests)
        except DeskError as exc:
            raise CommandError(f"nothing accepted: {exc.detail}") from exc
        for name in accepted:
            self.stdout.write(f"accepted {server}/{name}")

    def _show(self, row: PinRow) -> None:
        pin = row.pin
        self.stdout.write(f"{pin.server}/{pin.tool}: {pin.pending_reason}")
        if not _acceptable(row):
            self.stdout.write(
                "  refused: not a change a worker recorded (its seal does not verify)"
                if tool_name_acceptable(pin.tool)
                else "  refused: the desk refuses this tool name"
            )
            return
        if pin.pending_state == PendingState.GONE:
            self.stdout.write(
                f"  no longer served (pinned digest {row.short_digest}): accepting removes its pin"
            )
            return
        self.stdout.write(f"  served digest {pin.pending_digest}")
        for kind, line in row.diff:
            self.stdout.write(f"  {kind} {line}".rstrip() if kind != "…" else "  …")

    def _confirm(self, server: str, names: list[str]) -> None:
        if not sys.stdin.isatty():
            raise CommandError(
                f"accept {', '.join(names)} of {server}? Confirm with --yes, or name each tool: "
                "--tool NAME=DIGEST_PREFIX"
            )
        answer = input(f"Accept what {server} serves now for {', '.join(names)}? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            raise CommandError("nothing accepted")


def _acceptable(row: PinRow) -> bool:
    return tool_name_acceptable(row.pin.tool) and pending_verifies(row.pin)


def _digest_named(server: str, row: PinRow, prefix: str) -> str:
    """The pending digest of the row, if `prefix` names it (`gone` for a tool no longer served)."""
    pin = row.pin
    if pin.pending_state == PendingState.GONE:
        if prefix != "gone":
            raise CommandError(f"{server}/{pin.tool} is no longer served: name it {pin.tool}=gone")
        return ""
    if len(prefix) < MIN_PREFIX or not pin.pending_digest.startswith(prefix.lower()):
        raise CommandError(
            f"{server}/{pin.tool} is served with digest {pin.pending_digest[:12]}…: name at least "
            f"{MIN_PREFIX} of its first characters (--tool {pin.tool}=DIGEST_PREFIX)"
        )
    return pin.pending_digest
