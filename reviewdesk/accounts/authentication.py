from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.utils import timezone
from rest_framework import authentication, exceptions

from reviewdesk.accounts.models import ApiToken
from reviewdesk.accounts.services import token_digest


class BearerTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer <token>`; `request.auth` is the ApiToken (its scopes)."""

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode(errors="replace")
        if not header.lower().startswith("bearer "):
            return None
        raw = header[7:].strip()
        token = (
            ApiToken.objects.select_related("user")
            .filter(token_sha256=token_digest(raw), revoked_at__isnull=True)
            .first()
        )
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
