"""`python manage.py review --as USER`: decide the pending approvals USER may decide, in a terminal.

Whoever runs manage.py holds the desk's settings and keys, so `--as` names the reviewer
the decisions are signed and audited for; it still refuses a user who may not review."""

from __future__ import annotations

import sys

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from reviewdesk.accounts.management.commands.trust import load_key_file
from reviewdesk.desk.terminal import review
from reviewdesk.lib.errors import DeskError


class Command(BaseCommand):
    stealth_options = ("stdin",)  # call_command(..., stdin=...) in tests
    help = "Review the pending approvals USER may decide: approve, reject or edit each, in the terminal."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--as", dest="username", required=True, metavar="USER", help="the reviewer")
        parser.add_argument(
            "--key",
            default=None,
            metavar="PATH",
            help="sign each decision with this device key file (Ed25519 PEM)",
        )

    def handle(self, *args, username: str, key: str | None = None, **options) -> None:
        user = get_user_model().objects.filter(username=username, is_active=True).first()
        if user is None:
            raise CommandError(f"no active user {username!r}")
        try:
            review(
                user=user,
                stdin=options.get("stdin") or sys.stdin,
                stdout=options.get("stdout") or sys.stdout,
                key=load_key_file(key) if key else None,
            )
        except DeskError as exc:
            raise CommandError(exc.detail) from None
        except KeyboardInterrupt:  # Ctrl-C: a decision being made rolls back with its transaction
            self.stderr.write("\nInterrupted; what was decided before stays decided.")
            raise SystemExit(130) from None
