from __future__ import annotations

from django.conf import settings
from django.db import models


class ChainVersion(models.IntegerChoices):
    """How a row's hash is computed (reviewdesk/audit/chain.py).

    PLAIN rows were written before the chain was keyed: SHA-256 of the previous
    hash and the fields, which anyone with write access could recompute. KEYED
    rows are HMAC-SHA256 under the audit key (not in the database) and also cover
    the row id and actor id. PLAIN rows verify under their old rule only before
    the first KEYED row: a PLAIN row after it is a downgrade and fails.
    """

    PLAIN = 1
    KEYED = 2


class AuditEvent(models.Model):
    """Who did what to which subject, when. Each row hashes its predecessor."""

    at = models.DateTimeField()
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True)
    actor_name = models.CharField(max_length=150)  # kept even if the user is renamed
    action = models.CharField(max_length=100, db_index=True)
    subject_type = models.CharField(max_length=50)
    subject_id = models.CharField(max_length=100, db_index=True)
    data = models.JSONField(default=dict)
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64, unique=True)
    version = models.PositiveSmallIntegerField(choices=ChainVersion.choices, default=ChainVersion.KEYED)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(version__in=ChainVersion.values), name="audit_event_version_known"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor_name} {self.action} {self.subject_type}:{self.subject_id}"
