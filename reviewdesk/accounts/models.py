from __future__ import annotations

from django.conf import settings
from django.db import models


class Scope(models.TextChoices):
    SUBMIT = "submit"
    REVIEW = "review"
    AUDIT = "audit"


class ApiToken(models.Model):
    """A bearer token. Only its SHA-256 is stored; the token is shown once, at creation."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=16, db_index=True)
    token_sha256 = models.CharField(max_length=64, unique=True)
    scopes = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user}, {' '.join(self.scopes)})"

    def has_scope(self, scope: str) -> bool:
        return self.revoked_at is None and scope in self.scopes
