import os
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand
from django.db import transaction

from reviewdesk import embedded
from reviewdesk.accounts.roles import REVIEWERS, SUBMITTERS

DEMO_USERS = (
    ("alice", [REVIEWERS], False),
    ("bob", [REVIEWERS], False),
    ("carol", [SUBMITTERS], False),
    ("admin", [REVIEWERS], True),
)


def demo_password() -> str:
    """$DESK_DEMO_PASSWORD, else one generated on first run and kept in var/."""
    return os.environ.get("DESK_DEMO_PASSWORD") or embedded.read_or_create_secret(
        Path(settings.VAR_DIR) / "demo_password", nbytes=9
    )


class Command(BaseCommand):
    help = "Create the demo users alice and bob (reviewers), carol (submitter) and admin."

    @transaction.atomic
    def handle(self, *args, **options):
        password = demo_password()
        users = get_user_model()
        for name in (REVIEWERS, SUBMITTERS):
            Group.objects.get_or_create(name=name)
        for username, groups, staff in DEMO_USERS:
            user, _ = users.objects.get_or_create(username=username)
            user.email = f"{username}@reviewdesk.local"
            user.is_staff = user.is_superuser = staff
            user.set_password(password)
            user.save()
            user.groups.set(Group.objects.filter(name__in=groups))
        self.stdout.write(
            f"demo users: alice, bob (reviewers), carol (submits runs), admin; password: {password}"
        )
