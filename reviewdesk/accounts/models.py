from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


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
    # Optional: from this moment the API refuses the token (401), as if revoked.
    expires_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user}, {' '.join(self.scopes)})"

    def is_expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= timezone.now()

    def is_usable(self) -> bool:
        """Neither revoked nor expired: what authentication and the streams' re-checks ask."""
        return self.revoked_at is None and not self.is_expired()

    def has_scope(self, scope: str) -> bool:
        return self.is_usable() and scope in self.scopes


class DeviceKey(models.Model):
    """A reviewer's own Ed25519 public key (a browser's non-extractable key, or a key file).

    Inert until an admin endorses it. The private half never reaches the server. Workers do
    not trust this row: they trust the signed endorsement, which names the public key."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="device_keys")
    label = models.CharField(max_length=100)
    public_key = models.CharField(max_length=64)  # base64 of the raw 32 bytes
    key_id = models.CharField(max_length=64, unique=True)  # agents.decisions.key_id_for
    fingerprint = models.CharField(max_length=80)  # full SHA-256, grouped, for comparing by eye
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at"]

    def __str__(self) -> str:
        return f"{self.label} ({self.user}, {self.key_id})"


class SignedKeyRecord(models.Model):
    """An endorsement or revocation exactly as signed: `agents.trust` re-verifies it."""

    device_key = models.ForeignKey(DeviceKey, on_delete=models.CASCADE)
    record = models.JSONField()
    signature = models.TextField()  # base64 Ed25519 over the record's RFC 8785 bytes
    signer_key_id = models.CharField(max_length=64)
    signed_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        abstract = True
        ordering = ["created_at"]


class Endorsement(SignedKeyRecord):
    pass


class Revocation(SignedKeyRecord):
    pass


class NotifyMode(models.TextChoices):
    """How a reviewer hears of what waits for them (approvals/lifecycle/notify.py)."""

    DIGEST = "digest", "A digest"
    EVERY = "every", "One mail per item"
    OFF = "off", "No mail"


class NotificationPreference(models.Model):
    """A reviewer's own notification settings (`/settings/`; accounts/preferences.py).

    No row: the defaults (a digest at the desk's default interval, immediate mail for what is
    assigned to them by name and for what is about to expire). `digest_sent_at` is the digest's
    compare-and-set: a digest is sent only by the tick that moves it from the value it read."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        primary_key=True,
        related_name="notification_preference",
    )
    mode = models.CharField(max_length=10, choices=NotifyMode.choices, default=NotifyMode.DIGEST)
    # None: the desk's default interval (DESK_NOTIFY_DIGEST_MINUTES), followed when it changes.
    digest_minutes = models.PositiveSmallIntegerField(null=True, blank=True)
    immediate_assigned = models.BooleanField(default=True)
    immediate_expiring = models.BooleanField(default=True)
    digest_sent_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=models.Q(mode__in=NotifyMode.values), name="notify_mode_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.user} ({self.mode})"
