from __future__ import annotations

from datetime import timedelta
from importlib import import_module
from typing import Any

from django.conf import settings
from django.contrib.auth import HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.utils import timezone
from django.utils.crypto import constant_time_compare
from rest_framework import authentication, exceptions

from reviewdesk.accounts.models import ApiToken
from reviewdesk.accounts.rows import token_for_digest
from reviewdesk.accounts.services import token_digest


class BearerTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer <token>`; `request.auth` is the ApiToken (its scopes)."""

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode(errors="replace")
        if not header.lower().startswith("bearer "):
            return None
        raw = header[7:].strip()
        token = token_for_digest(token_digest(raw))
        if token is None or not token.user.is_active:
            raise exceptions.AuthenticationFailed("invalid or revoked token")
        if token.is_expired():
            raise exceptions.AuthenticationFailed("this token has expired")
        token_touch(token)
        return token.user, token

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="api"'


def token_touch(token: ApiToken) -> None:
    """Record that the token was used, at most once every DESK_TOKEN_LAST_USED_SECONDS: a write
    per request would make every API read a database write (and serialise on SQLite)."""
    now = timezone.now()
    every = timedelta(seconds=settings.DESK_TOKEN_LAST_USED_SECONDS)
    if token.last_used_at is not None and now - token.last_used_at < every:
        return
    # Conditional, so that concurrent requests of one token write once between them.
    ApiToken.objects.filter(pk=token.pk, last_used_at=token.last_used_at).update(last_used_at=now)
    token.last_used_at = now


def session_user_now(user_pk: Any, session_key: str | None):
    """The user a long-lived connection opened with a browser session (the desk socket, an SSE
    stream) belongs to, as they are now; None once that session no longer logs them in (logged
    out, password changed: Django's own check) or they were deactivated. Read fresh each time,
    so a role taken away (is_staff) is gone from the next check on."""
    user = get_user_model().objects.filter(pk=user_pk, is_active=True).first()
    if user is None or session_key is None:
        return None
    data = import_module(settings.SESSION_ENGINE).SessionStore(session_key).load()
    if str(data.get(SESSION_KEY)) != str(user.pk) or not constant_time_compare(
        data.get(HASH_SESSION_KEY, ""), user.get_session_auth_hash()
    ):
        return None
    return user
