from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from reviewdesk.audit.keys import AnchorKeyMissing
from reviewdesk.audit.verification import audit_check, audit_check_record


class Command(BaseCommand):
    help = (
        "Check the whole audit chain (keyed hashes, links) and every anchor; exit 1 naming the "
        "first bad row. Records nothing unless --record is given."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        # Opt-in: recording signs with the anchor key, so it runs where beat's worker runs (the
        # key is there); where there is none it refuses, rather than make one on, say, a web host.
        parser.add_argument(
            "--record",
            action="store_true",
            help=(
                "also record the result for the audit page, as beat's audit.check does "
                "(DESK_AUDIT_CHECK_FILE, signed with the anchor key: run it where that key is)"
            ),
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            report = audit_check_record(create_key=False) if options["record"] else audit_check()
        except AnchorKeyMissing as exc:
            raise CommandError(f"not recorded: {exc}") from None
        if not report.intact:
            raise CommandError(report.describe())
        self.stdout.write(report.describe())
