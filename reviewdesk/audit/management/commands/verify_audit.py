from typing import Any

from django.core.management.base import BaseCommand, CommandError

from reviewdesk.audit.services import audit_check


class Command(BaseCommand):
    help = "Check the audit chain (keyed hashes, links) and its anchors; exit 1 naming the first bad row."

    def handle(self, *args: Any, **options: Any) -> None:
        report = audit_check()
        if not report.intact:
            raise CommandError(report.describe())
        self.stdout.write(report.describe())
