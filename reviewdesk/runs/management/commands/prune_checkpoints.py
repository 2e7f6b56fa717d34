from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from reviewdesk.runs.retention import ended_runs_prune_batch, kept_after_end


class Command(BaseCommand):
    help = (
        "Prune ended runs' checkpoints to their last DESK_CHECKPOINTS_KEPT_AFTER_END (and any an "
        "approval names), as the desk does when a run ends: for runs that ended before it did, or "
        "while the setting was larger. The message log stays whole."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--batch", type=int, default=200, help="runs to a transaction (default 200)")

    def handle(self, *args: Any, batch: int, **options: Any) -> None:
        after, runs, deleted = None, 0, 0
        self.stdout.write(f"keeping each ended run's last {kept_after_end()} checkpoints")
        while True:
            after, pruned, gone = ended_runs_prune_batch(after=after, batch=max(1, batch))
            if after is None:
                break
            runs, deleted = runs + pruned, deleted + gone
            if gone:
                self.stdout.write(f"  {deleted} checkpoints pruned from {runs} runs so far")
        self.stdout.write(f"pruned {deleted} checkpoints from {runs} ended runs")
