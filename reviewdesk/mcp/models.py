"""The pins of MCP servers' tool definitions: one row per (server, tool).

The row holds the accepted definition, its digest and the signed record of who accepted it
(`seals.py`), and, while the server serves something else, what it serves (`pending_*`). The
worker trusts a row only when its record verifies over its own definition's digest.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class PendingState(models.TextChoices):
    NONE = "", "none"
    CHANGED = "changed", "changed"  # served otherwise than accepted
    GONE = "gone", "gone"  # accepted, no longer served


class ToolPin(models.Model):
    server = models.CharField(max_length=200)
    tool = models.CharField(max_length=200)
    # The accepted definition (`ToolDefinition.to_dict()`) and its digest, as signed. None (and
    # "") for a tool no admin has accepted yet, served by a server the desk had already seen.
    definition = models.JSONField(null=True, blank=True)
    digest = models.CharField(max_length=64, blank=True, default="")
    # Null: pinned by the desk on first sight; else the admin who accepted the definition.
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    accepted_by_name = models.CharField(
        max_length=150, blank=True, default=""
    )  # as signed; "the desk" on first sight
    accepted_at = models.DateTimeField(null=True, blank=True)
    key_id = models.CharField(max_length=64, blank=True, default="")  # the desk's key id, or seals.CHAIN_SEAL
    signature = models.TextField(blank=True, default="")
    # What the server serves now, while it differs from the accepted definition.
    pending_state = models.CharField(
        max_length=10, choices=PendingState.choices, default=PendingState.NONE, blank=True
    )
    pending_definition = models.JSONField(null=True, blank=True)  # None when GONE
    pending_digest = models.CharField(max_length=64, blank=True, default="")
    pending_since = models.DateTimeField(null=True, blank=True)
    pending_reason = models.CharField(max_length=200, blank=True, default="")
    # The worker's seal over what it recorded pending (`seals.seal_pending`): an accept signs
    # only a pending definition a worker saw served, not one a database writer put there.
    pending_seal = models.CharField(max_length=64, blank=True, default="")

    class Meta:
        ordering = ["server", "tool"]
        constraints = [
            # Two workers seeing a server's tools for the first time make one pin each, not two.
            models.UniqueConstraint(fields=["server", "tool"], name="mcp_pin_one_per_tool"),
            models.CheckConstraint(
                condition=models.Q(pending_state__in=PendingState.values), name="mcp_pin_pending_state_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.server}/{self.tool}"
