from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from reviewdesk.accounts.models import Scope
from reviewdesk.accounts.services import token_create


class Command(BaseCommand):
    help = "Create an API token for USERNAME and print it (it is stored hashed, shown once)."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--scope", action="append", choices=Scope.values, required=True)
        parser.add_argument("--name", default="")
        parser.add_argument("--expires-in-days", type=int, default=0, help="0 (default): never expires")

    def handle(self, *args, username, scope, name, expires_in_days, **options):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user {username!r}")
        if expires_in_days < 0:
            raise CommandError("--expires-in-days must be 0 (never) or more")
        expires_at = timezone.now() + timedelta(days=expires_in_days) if expires_in_days else None
        _, raw = token_create(
            user=user, scopes=scope, name=name, via="manage.py create_token", expires_at=expires_at
        )
        self.stdout.write(raw)
