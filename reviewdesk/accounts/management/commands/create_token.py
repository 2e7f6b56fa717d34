from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from reviewdesk.accounts.models import Scope
from reviewdesk.accounts.services import token_create


class Command(BaseCommand):
    help = "Create an API token for USERNAME and print it (it is stored hashed, shown once)."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--scope", action="append", choices=Scope.values, required=True)
        parser.add_argument("--name", default="")

    def handle(self, *args, username, scope, name, **options):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user {username!r}")
        _, raw = token_create(user=user, scopes=scope, name=name)
        self.stdout.write(raw)
