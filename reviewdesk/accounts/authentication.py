from __future__ import annotations

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
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now())
        return token.user, token

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="api"'
