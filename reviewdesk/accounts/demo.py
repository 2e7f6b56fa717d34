"""The demo users and their password: what `seed_demo` creates, and where `make run` says it is."""

from __future__ import annotations

import os
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction

from reviewdesk.accounts.roles import REVIEWERS, SUBMITTERS
from reviewdesk.accounts.services import group_save, user_groups_set, user_save
from reviewdesk.conf import var

VIA = "manage.py seed_demo"

# The demo's routing group: refunds over 1,000 are finance's to decide (agents.demo).
FINANCE = "finance"

# (username, groups, staff and superuser)
DEMO_USERS = (
    ("alice", [REVIEWERS], False),
    ("bob", [REVIEWERS], False),
    ("dave", [REVIEWERS, FINANCE], False),
    ("carol", [SUBMITTERS], False),
    ("admin", [REVIEWERS], True),
)


def demo_password_file() -> Path:
    return Path(settings.VAR_DIR) / "demo_password"


def demo_password() -> str:
    """$DESK_DEMO_PASSWORD, else one generated on first run and kept in var/demo_password (0600)."""
    if os.environ.get("DESK_DEMO_PASSWORD"):
        return os.environ["DESK_DEMO_PASSWORD"]
    path = demo_password_file()
    password = var.read_or_create_secret(path, nbytes=9)
    # Made 0600, as a file of an older desk or an operator's copy may not be.
    if path.stat().st_mode & 0o077:
        os.chmod(path, 0o600)
    return password


def demo_password_whereabouts() -> str:
    """Where the demo password is, for what `make run` prints: never the password itself, which
    would then sit in every log and terminal scrollback the output reaches (issue 34, attack 6)."""
    if os.environ.get("DESK_DEMO_PASSWORD"):
        return "$DESK_DEMO_PASSWORD"
    demo_password()  # created on first run, 0600
    return f"in {demo_password_file()} (mode 0600)"


@transaction.atomic
def demo_users_seed() -> str:
    """Create or reset the demo users and their groups; return the password they now have."""
    password = demo_password()
    users = get_user_model()
    for name in (REVIEWERS, SUBMITTERS, FINANCE):
        if not Group.objects.filter(name=name).exists():
            group_save(group=Group(name=name), by=None, created=True, via=VIA)
    for username, groups, staff in DEMO_USERS:
        user = users.objects.filter(username=username).first()
        created = user is None
        if created:
            user = users(username=username)
        changed = [] if created or user.is_staff == staff else ["is_staff", "is_superuser"]
        email = f"{username}@reviewdesk.local"
        if not created and user.email != email:
            changed.append("email")
        # A reset is audited when it changes the password (a production desk's own `admin`,
        # say), not on every `make run`, which finds the same one (one hash either way).
        if not user.check_password(password):  # a new user has none
            user.set_password(password)
            if not created:
                changed.append("password")
        user.email = email
        user.is_staff = user.is_superuser = staff
        user_save(user=user, by=None, created=created, changed=changed, via=VIA)
        user_groups_set(user=user, groups=Group.objects.filter(name__in=groups), by=None, via=VIA)
    return password
