"""seed_demo creates the demo users with the password whose whereabouts the launcher prints."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command

from reviewdesk.accounts.demo import FINANCE, demo_password
from reviewdesk.accounts.roles import REVIEWERS, SUBMITTERS

pytestmark = pytest.mark.django_db


def test_seed_demo_creates_the_demo_users_and_says_where_the_password_is_not_what_it_is(monkeypatch, capsys):
    monkeypatch.setenv("DESK_DEMO_PASSWORD", "correct horse")

    call_command("seed_demo")
    call_command("seed_demo")  # again: it resets, never duplicates

    assert demo_password() == "correct horse"
    out = capsys.readouterr().out
    assert "correct horse" not in out and "password: $DESK_DEMO_PASSWORD" in out
    users = {u.username: u for u in User.objects.prefetch_related("groups")}
    assert sorted(users) == ["admin", "alice", "bob", "carol", "dave"]
    assert {name: sorted(g.name for g in u.groups.all()) for name, u in users.items()} == {
        "admin": [REVIEWERS],
        "alice": [REVIEWERS],
        "bob": [REVIEWERS],
        "carol": [SUBMITTERS],
        "dave": sorted([FINANCE, REVIEWERS]),  # the demo's large refunds route to finance
    }
    assert [name for name, u in users.items() if u.is_superuser] == ["admin"]
    assert all(u.check_password("correct horse") for u in users.values())


def test_without_the_variable_the_password_is_generated_once_and_kept(monkeypatch, settings, tmp_path):
    monkeypatch.delenv("DESK_DEMO_PASSWORD", raising=False)
    settings.VAR_DIR = tmp_path

    first = demo_password()

    assert first and demo_password() == first == (tmp_path / "demo_password").read_text().strip()


@pytest.mark.django_db(transaction=True)
def test_seed_demo_before_anything_listens_pushes_nothing(monkeypatch):
    """`make run` seeds before it starts Redis: reseeding (passwords and groups set again) must
    not try to tell sockets to re-check (a warning, or a traceback, in the first thing a new
    user reads). Transactional, so the on-commit pushes would really be attempted."""
    from reviewdesk.events import services

    pushed = []
    monkeypatch.setattr(services, "users_push", lambda ids, message: pushed.append(ids))
    monkeypatch.setattr("reviewdesk.events.signals.users_push", lambda ids, message: pushed.append(ids))
    call_command("seed_demo")
    call_command("seed_demo")
    assert pushed == []
    User.objects.get(username="alice").save()  # outside seed_demo, a save does push
    assert pushed == [[User.objects.get(username="alice").pk]]


def test_seed_demo_audits_a_password_it_resets_and_only_then(monkeypatch):
    """seed_demo may run on a production desk, which has an `admin` of its own: resetting that
    account's password (or its email) to the demo's left no audit row, nor did creating its
    groups, though docs/ say seed_demo's changes to users and groups are audited. A run
    that changes nothing adds no row."""
    from reviewdesk.audit.models import AuditEvent

    monkeypatch.setenv("DESK_DEMO_PASSWORD", "correct horse")
    call_command("seed_demo")
    created = AuditEvent.objects.filter(action="group.created").values_list("data__name", flat=True)
    assert sorted(created) == sorted([REVIEWERS, SUBMITTERS, FINANCE])
    admin = User.objects.get(username="admin")
    admin.set_password("the real admin's own")
    admin.email = "ops@example.com"
    admin.save()
    last = AuditEvent.objects.order_by("id").last().id

    call_command("seed_demo")
    written = AuditEvent.objects.filter(id__gt=last)
    assert [(e.action, e.data["username"], e.data["fields"]) for e in written] == [
        ("user.changed", "admin", ["email", "password"])
    ]

    last = AuditEvent.objects.order_by("id").last().id
    call_command("seed_demo")
    assert not AuditEvent.objects.filter(id__gt=last).exists()


def test_seed_demo_says_the_generated_password_is_in_a_0600_file_and_never_prints_it(
    monkeypatch, settings, tmp_path, capsys
):
    monkeypatch.delenv("DESK_DEMO_PASSWORD", raising=False)
    settings.VAR_DIR = tmp_path

    call_command("seed_demo")

    password, out = demo_password(), capsys.readouterr().out
    assert password not in out
    assert f"password: in {tmp_path / 'demo_password'} (mode 0600)" in out
    assert (tmp_path / "demo_password").stat().st_mode & 0o777 == 0o600


def test_a_world_readable_password_file_is_made_0600_when_read(monkeypatch, settings, tmp_path):
    monkeypatch.delenv("DESK_DEMO_PASSWORD", raising=False)
    settings.VAR_DIR = tmp_path
    (tmp_path / "demo_password").write_text("from an older desk\n")
    (tmp_path / "demo_password").chmod(0o644)

    assert demo_password() == "from an older desk"
    assert (tmp_path / "demo_password").stat().st_mode & 0o777 == 0o600
