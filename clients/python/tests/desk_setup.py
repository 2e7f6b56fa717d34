"""Run by the desk's own Python (never imported by the client): migrate the desk's database,
make the test accounts and their tokens, make the signing key, and print what the tests need as
JSON on the last line of stdout.

    svc:   a service account in `submitters` and `reviewers` (so four eyes, not a missing role,
           is what stops it deciding its own calls); a `submit` token and a `review` token
    alice, bob: reviewers (manage.py seed_demo), each with a `review` token
"""

from __future__ import annotations

import io
import json
import os
import sys

import django


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reviewdesk.settings")
    django.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.core.management import call_command

    from reviewdesk.accounts.roles import REVIEWERS, SUBMITTERS
    from reviewdesk.accounts.services import user_groups_set, user_save
    from reviewdesk.approvals.signing import ensure_keys, read_keyring

    call_command("migrate", "--noinput", verbosity=0)
    call_command("seed_demo", stdout=io.StringIO())
    users = get_user_model()
    svc = users.objects.filter(username="svc").first()
    if svc is None:
        svc = users(username="svc", email="svc@reviewdesk.local")
        svc.set_unusable_password()
        user_save(user=svc, by=None, created=True, via="client tests")
    user_groups_set(
        user=svc, groups=Group.objects.filter(name__in=[SUBMITTERS, REVIEWERS]), by=None, via="client tests"
    )

    def token(username: str, *scopes: str) -> str:
        out = io.StringIO()
        args = [username]
        for scope in scopes:
            args += ["--scope", scope]
        call_command("create_token", *args, "--name", "client tests", stdout=out)
        return out.getvalue().strip()

    key_id = ensure_keys()
    result = {
        "tokens": {
            "svc": token("svc", "submit"),
            "svc_review": token("svc", "review"),
            "alice": token("alice", "review"),
            "bob": token("bob", "review"),
        },
        "key_id": key_id,
        "keys": read_keyring(settings.DESK_VERIFY_KEYS_FILE),
        "redis_socket": str(settings.EMBEDDED_REDIS_SOCKET or ""),
    }
    sys.stdout.write("\n" + json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
