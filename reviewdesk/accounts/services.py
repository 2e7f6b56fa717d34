from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable

from django.contrib.auth.models import AbstractBaseUser

from reviewdesk.accounts.models import ApiToken, Scope

TOKEN_PREFIX = "rd_"


def token_digest(raw: str) -> str:
    # Tokens carry 256 bits of entropy, so a fast hash is enough (no stretching needed).
    return hashlib.sha256(raw.encode()).hexdigest()


def token_create(*, user: AbstractBaseUser, scopes: Iterable[str], name: str = "") -> tuple[ApiToken, str]:
    """Create a token; return the row and the raw token, which is never stored."""
    scopes = sorted(set(scopes))
    unknown = set(scopes) - set(Scope.values)
    if unknown or not scopes:
        raise ValueError(f"scopes must be among {', '.join(Scope.values)}; got {scopes}")
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        user=user, name=name, prefix=raw[:10], token_sha256=token_digest(raw), scopes=scopes
    )
    return token, raw
