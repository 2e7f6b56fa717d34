from typing import Any

from django.core.management.base import BaseCommand

from reviewdesk.accounts.demo import demo_users_seed


class Command(BaseCommand):
    help = (
        "Create the demo users alice, bob and dave (reviewers; dave in finance), carol (submitter) and admin."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        password = demo_users_seed()
        self.stdout.write(
            f"demo users: alice, bob, dave (reviewers; dave in finance), carol (submits runs), admin; password: {password}"
        )
