from __future__ import annotations

from django.conf import settings
from django.db import models


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

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor_name} {self.action} {self.subject_type}:{self.subject_id}"
