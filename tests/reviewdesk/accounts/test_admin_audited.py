"""The admin is an audit surface: token rows are read-only, and user and group changes are audited."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from django.core.management import call_command
from rest_framework.test import APIClient

from reviewdesk.accounts.models import ApiToken
from reviewdesk.accounts.roles import REVIEWERS, SUBMITTERS
from reviewdesk.accounts.services import token_create, token_revoke
from reviewdesk.audit.models import AuditEvent

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client, personas):
    client.force_login(personas.admin)
    return client


def api_status(raw: str) -> int:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client.get("/api/v1/runs").status_code


def revoked_token(personas) -> tuple[ApiToken, str]:
    token, raw = token_create(user=personas.carol, scopes=["submit"])
    assert api_status(raw) == 200
    assert token_revoke(token=token, by=personas.admin)
    return token, raw


def test_a_revoked_token_cannot_be_revived_through_the_admin_change_form(admin_client, personas):
    token, raw = revoked_token(personas)
    url = f"/admin/accounts/apitoken/{token.pk}/change/"

    response = admin_client.post(
        url, {"name": token.name, "revoked_at_0": "", "revoked_at_1": "", "_save": "Save"}
    )

    assert response.status_code == 403
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert api_status(raw) == 401
    assert 'name="revoked_at' not in admin_client.get(url).content.decode()


def test_the_admin_revokes_tokens_with_an_audited_action(admin_client, personas):
    token, raw = token_create(user=personas.carol, scopes=["submit"])

    response = admin_client.post(
        "/admin/accounts/apitoken/", {"action": "revoke_tokens", "_selected_action": [token.pk]}
    )

    assert response.status_code == 302
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert api_status(raw) == 401
    row = AuditEvent.objects.get(action="token.revoked")
    assert (row.actor, row.subject_id, row.data["via"]) == (personas.admin, str(token.pk), "admin")


def test_revoking_twice_changes_nothing_and_audits_once(personas):
    token, _ = revoked_token(personas)
    first = token.revoked_at
    assert not token_revoke(token=token, by=personas.admin)
    token.refresh_from_db()
    assert token.revoked_at == first
    assert AuditEvent.objects.filter(action="token.revoked").count() == 1


def user_form(user, groups) -> dict:
    """The admin's user change form as a browser posts it, changing nothing but what a test edits."""
    joined = [user.date_joined.strftime("%Y-%m-%d"), user.date_joined.strftime("%H:%M:%S")]
    return {
        "username": user.username,
        "first_name": "",
        "last_name": "",
        "email": user.email,
        "is_active": "on",
        "groups": [group.pk for group in groups],
        "last_login_0": "",
        "last_login_1": "",
        "date_joined_0": joined[0],
        "date_joined_1": joined[1],
        # The admin renders the dates' initial values as hidden inputs and compares against them.
        "initial-date_joined_0": joined[0],
        "initial-date_joined_1": joined[1],
        "_save": "Save",
    }


def test_adding_alice_to_a_group_in_the_admin_is_audited_in_the_admins_name(admin_client, personas):
    submitters = Group.objects.get(name=SUBMITTERS)
    reviewers = Group.objects.get(name=REVIEWERS)

    response = admin_client.post(
        f"/admin/auth/user/{personas.alice.pk}/change/", user_form(personas.alice, [reviewers, submitters])
    )

    assert response.status_code == 302, response.content.decode()[:2000]
    assert set(personas.alice.groups.values_list("name", flat=True)) == {REVIEWERS, SUBMITTERS}
    row = AuditEvent.objects.get(action="user.groups_changed")
    assert (row.actor, row.actor_name, row.subject_id) == (personas.admin, "admin", str(personas.alice.pk))
    assert (row.data["added"], row.data["removed"], row.data["via"]) == ([SUBMITTERS], [], "admin")


def test_deactivating_a_user_in_the_admin_is_audited(admin_client, personas):
    form = user_form(personas.bob, [Group.objects.get(name=REVIEWERS)])
    del form["is_active"]

    response = admin_client.post(f"/admin/auth/user/{personas.bob.pk}/change/", form)

    assert response.status_code == 302
    personas.bob.refresh_from_db()
    assert not personas.bob.is_active
    row = AuditEvent.objects.get(action="user.deactivated")
    assert (row.actor, row.subject_id, row.data["fields"]) == (
        personas.admin,
        str(personas.bob.pk),
        ["is_active"],
    )
    assert not AuditEvent.objects.filter(action="user.groups_changed").exists()


def test_creating_a_user_in_the_admin_is_audited(admin_client, personas):
    response = admin_client.post(
        "/admin/auth/user/add/",
        {"username": "dave", "usable_password": "false", "password1": "", "password2": "", "_save": "Save"},
    )

    assert response.status_code == 302, response.content.decode()[:3000]
    row = AuditEvent.objects.get(action="user.created")
    assert (row.actor, row.data["username"]) == (personas.admin, "dave")


def test_deleting_a_group_in_the_admin_is_audited_with_its_members(admin_client, personas):
    reviewers = Group.objects.get(name=REVIEWERS)

    response = admin_client.post(f"/admin/auth/group/{reviewers.pk}/delete/", {"post": "yes"})

    assert response.status_code == 302
    assert not Group.objects.filter(name=REVIEWERS).exists()
    row = AuditEvent.objects.get(action="group.deleted")
    assert (row.actor, row.data["members"]) == (personas.admin, ["admin", "alice", "bob"])


def test_the_create_token_command_is_audited(personas):
    call_command("create_token", "carol", "--scope", "submit", "--name", "ci")

    token = ApiToken.objects.get(user=personas.carol)
    row = AuditEvent.objects.get(action="token.created")
    assert (row.actor, row.actor_name, row.subject_id) == (None, "system", str(token.pk))
    assert row.data == {
        "user": "carol",
        "prefix": token.prefix,
        "scopes": ["submit"],
        "name": "ci",
        "via": "manage.py create_token",
    }


def pinned_trust_file(settings, tmp_path, directory: str = "") -> tuple:
    """The admin's key file registered, and the path `trust pin --out` is to write."""
    admin_file = tmp_path / "admin.pem"
    call_command("trust", "keygen", str(admin_file))
    call_command("trust", "register", "--user", "admin", "--key", str(admin_file))
    out = tmp_path / directory / "trust.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("the file the workers pin now\n")
    return out


def test_a_trust_pin_whose_audit_row_fails_leaves_the_trust_file_as_it_was(
    personas, settings, tmp_path, monkeypatch
):
    """The roots the workers trust change only with their audit row: the file was replaced
    first, then audited, so a failed audit write left new roots that no admin could see."""
    from reviewdesk.accounts import devicekeys

    out = pinned_trust_file(settings, tmp_path)

    def audit_write_fails(**_):
        raise RuntimeError("the audit row could not be written")

    monkeypatch.setattr(devicekeys, "audit_record", audit_write_fails)
    with pytest.raises(RuntimeError):
        call_command("trust", "pin", "--user", "admin", "--out", str(out))
    assert out.read_text() == "the file the workers pin now\n"


def test_a_trust_file_with_a_long_path_is_pinned_and_audited(personas, settings, tmp_path):
    """A volume's path (/var/lib/docker/volumes/<64 hex digits>/_data/trust.json) is over the
    100 characters an audit row's subject holds: on PostgreSQL the row failed, after the file."""
    out = pinned_trust_file(settings, tmp_path, directory="d" * 100)
    call_command("trust", "pin", "--user", "admin", "--out", str(out))
    row = AuditEvent.objects.get(action="trust.pinned")
    assert row.data["path"] == str(out)
    assert '"roots"' in out.read_text()


def test_a_password_changed_in_the_admin_is_audited_whoever_it_belongs_to(client, personas):
    """The user admin's form for another user's password was audited; the admin site's own
    page for the signed-in admin's password (/admin/password_change/) changed it with no trace."""
    personas.admin.set_password("old horse battery")
    personas.admin.save()
    client.force_login(personas.admin)

    response = client.post(
        "/admin/password_change/",
        {
            "old_password": "old horse battery",
            "new_password1": "a new staple of 2026",
            "new_password2": "a new staple of 2026",
        },
    )

    assert response.status_code == 302, response.content.decode()[:2000]
    row = AuditEvent.objects.get(action="user.password_changed")
    assert (row.actor, row.subject_id, row.data["via"]) == (personas.admin, str(personas.admin.pk), "admin")

    response = client.post(
        f"/admin/auth/user/{personas.bob.pk}/password/",
        {
            "password1": "bob's new staple 2026",
            "password2": "bob's new staple 2026",
            "usable_password": "true",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    assert AuditEvent.objects.filter(action="user.password_changed", subject_id=str(personas.bob.pk)).exists()
