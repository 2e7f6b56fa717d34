"""MCP servers' tools and their pins.

    manage.py mcp_tools                   every server's tools: pin state, pinned digest (short)
    manage.py mcp_tools --accept SERVER   accept what SERVER serves now (as the workers last
                                          listed it), for each of its changed or gone tools

Accepting is audited as the command's (actor "system"), as `trust` and `create_token` are, and
signed with the desk's key: run it where the web tier runs.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from reviewdesk.mcp.selectors import pin_rows
from reviewdesk.mcp.services import server_accept


class Command(BaseCommand):
    help = "List MCP servers' tools and their pin state; --accept SERVER accepts what it serves now."

    def add_arguments(self, parser):
        parser.add_argument(
            "--accept", metavar="SERVER", default=None, help="accept SERVER's served definitions"
        )

    def handle(self, *args, accept: str | None = None, **options):
        if accept is not None:
            if not pin_rows(accept):
                raise CommandError(f"no pinned tools on server {accept!r}")
            accepted = server_accept(server=accept)
            if not accepted:
                self.stdout.write(f"{accept}: every tool is served as pinned; nothing to accept")
            for tool in accepted:
                self.stdout.write(f"accepted {accept}/{tool}")
            return
        rows = pin_rows()
        if not rows:
            self.stdout.write("no MCP tools seen yet")
        for row in rows:
            line = f"{row.pin.server}\t{row.pin.tool}\t{row.state}\t{row.short_digest}"
            if row.pin.pending_digest:
                line += f" -> {row.pending_short_digest}"
            if not row.signed:
                line += "\t(its signature does not verify: refused)"
            self.stdout.write(line)
