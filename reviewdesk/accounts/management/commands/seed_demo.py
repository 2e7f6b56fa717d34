from typing import Any

from django.core.management.base import BaseCommand

from reviewdesk.accounts.demo import demo_password_whereabouts, demo_users_seed
from reviewdesk.events.signals import rechecks_paused


class Command(BaseCommand):
    help = (
        "Create the demo users alice, bob and dave (reviewers; dave in finance), carol (submitter) and admin."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        with rechecks_paused():
            demo_users_seed()
        self.stdout.write(
            "demo users: alice, bob, dave (reviewers; dave in finance), carol (submits runs), admin; "
            f"password: {demo_password_whereabouts()}"
        )
