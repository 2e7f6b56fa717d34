"""/tokens/: a user lists, creates (secret shown once) and revokes their own API tokens; the
API refuses revoked and expired tokens; last use is written at most once a minute."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from reviewdesk.accounts.models import ApiToken
from reviewdesk.accounts.services import token_create, token_digest
from reviewdesk.audit.models import AuditEvent

pytestmark = pytest.mark.django_db


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def bearer(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def test_carol_creates_a_token_whose_secret_is_shown_once_and_works(personas):
    page = logged_in(personas.carol)
    response = page.post("/tokens/", {"name": "ci", "scopes": ["submit"], "expires_in_days": "30"})
    assert response.status_code == 200
    raw = response.context["created"][1]
    assert raw in response.content.decode()
    assert "no-store" in response["Cache-Control"] or "max-age=0" in response["Cache-Control"]
    token = ApiToken.objects.get(user=personas.carol)
    assert (token.name, token.scopes, token.token_sha256) == ("ci", ["submit"], token_digest(raw))
    assert timedelta(days=29) < token.expires_at - timezone.now() <= timedelta(days=30)
    # Shown once: the list never carries it again.
    listing = page.get("/tokens/").content.decode()
    assert raw not in listing and token.prefix in listing and "ci" in listing
    assert bearer(raw).get("/api/v1/runs").status_code == 200
    audited = AuditEvent.objects.get(action="token.created", subject_id=str(token.pk))
    assert audited.actor_name == "carol" and audited.data["via"] == "tokens page"


def test_a_token_needs_a_known_scope_and_an_offered_expiry(personas):
    page = logged_in(personas.carol)
    assert page.post("/tokens/", {"name": "x", "expires_in_days": "0"}).status_code == 422
    assert page.post("/tokens/", {"scopes": ["root"], "expires_in_days": "0"}).status_code == 422
    assert page.post("/tokens/", {"scopes": ["submit"], "expires_in_days": "3"}).status_code == 422
    # U+0000, which PostgreSQL text cannot hold: stored as typed, it was a 500.
    refused = page.post("/tokens/", {"name": "ci\x00", "scopes": ["submit"], "expires_in_days": "0"})
    assert refused.status_code == 422 and "may not hold a NUL" in refused.content.decode()
    assert not ApiToken.objects.exists()


def test_each_user_sees_only_their_own_tokens(personas):
    mine, _ = token_create(user=personas.carol, scopes=["submit"], name="carol-ci")
    theirs, _ = token_create(user=personas.alice, scopes=["review"], name="alice-laptop")
    listing = logged_in(personas.carol).get("/tokens/").content.decode()
    assert "carol-ci" in listing and "alice-laptop" not in listing
    assert mine.prefix in listing and theirs.prefix not in listing


def test_revoking_is_audited_and_the_api_refuses_the_token_at_once(personas):
    token, raw = token_create(user=personas.carol, scopes=["submit"], name="ci")
    assert bearer(raw).get("/api/v1/runs").status_code == 200
    response = logged_in(personas.carol).post(f"/tokens/{token.pk}/revoke/")
    assert response.status_code == 302
    token.refresh_from_db()
    assert token.revoked_at is not None
    refused = bearer(raw).get("/api/v1/runs")
    assert refused.status_code == 401 and refused.json()["code"] == "authentication_failed"
    audited = AuditEvent.objects.get(action="token.revoked", subject_id=str(token.pk))
    assert (audited.actor_name, audited.data["via"]) == ("carol", "tokens page")
    assert "revoked" in logged_in(personas.carol).get("/tokens/").content.decode()


def test_no_one_revokes_another_users_token(personas):
    token, raw = token_create(user=personas.alice, scopes=["review"])
    assert logged_in(personas.carol).post(f"/tokens/{token.pk}/revoke/").status_code == 404
    token.refresh_from_db()
    assert token.revoked_at is None and bearer(raw).get("/api/v1/approvals").status_code == 200
    assert not AuditEvent.objects.filter(action="token.revoked").exists()


def test_the_tokens_page_needs_a_login():
    assert Client().get("/tokens/").status_code == 302


def test_an_expired_token_is_refused_by_the_api_and_shown_as_expired(personas):
    token, raw = token_create(
        user=personas.carol, scopes=["submit"], name="short", expires_at=timezone.now() + timedelta(hours=1)
    )
    assert bearer(raw).get("/api/v1/runs").status_code == 200
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    refused = bearer(raw).get("/api/v1/runs")
    assert refused.status_code == 401 and refused.json()["code"] == "authentication_failed"
    assert bearer(raw).post("/api/v1/runs", {}, format="json").status_code == 401
    row = logged_in(personas.carol).get("/tokens/").content.decode()
    assert "expired" in row


def test_a_token_cannot_be_created_already_expired(personas):
    with pytest.raises(ValueError):
        token_create(user=personas.carol, scopes=["submit"], expires_at=timezone.now())


def test_last_use_is_written_at_most_once_a_minute(personas):
    token, raw = token_create(user=personas.carol, scopes=["submit"])
    client = bearer(raw)
    client.get("/api/v1/runs")
    first = ApiToken.objects.get(pk=token.pk).last_used_at
    assert first is not None
    client.get("/api/v1/runs")
    assert ApiToken.objects.get(pk=token.pk).last_used_at == first  # within the minute: no write
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=first - timedelta(seconds=61))
    client.get("/api/v1/runs")
    assert ApiToken.objects.get(pk=token.pk).last_used_at > first


def test_create_token_takes_an_expiry_in_days(personas):
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("create_token", "carol", "--scope", "submit", "--expires-in-days", "7", stdout=out)
    token = ApiToken.objects.get(token_sha256=token_digest(out.getvalue().strip()))
    assert timedelta(days=6) < token.expires_at - timezone.now() <= timedelta(days=7)


def test_an_open_streams_recheck_refuses_a_token_that_expired_since_it_opened(personas):
    """The SSE stream re-checks its caller at each keep-alive (`_still_allowed`, the user now or None); this asserts
    that check's answer, not a stream on the wire (tests/e2e/test_api_stream.py has those)."""
    from reviewdesk.api.views.streams import _still_allowed

    token, _ = token_create(
        user=personas.carol, scopes=["submit"], expires_at=timezone.now() + timedelta(hours=1)
    )
    assert _still_allowed(personas.carol, token, None, None) == personas.carol
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert _still_allowed(personas.carol, token, None, None) is None
