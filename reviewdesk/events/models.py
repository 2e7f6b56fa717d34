from __future__ import annotations

from django.db import models


class DeskEvent(models.Model):
    """Append-only, sequence-numbered record of a change a browser or client must see.

    `id` is the sequence. Writers serialise on a lock (`lib.db.serialize_writers`, taken by `events.services`) so
    sequence order is commit order and a replay "after N" never skips a late commit.
    """

    type = models.CharField(max_length=50)
    run = models.ForeignKey(
        "runs.Run", on_delete=models.CASCADE, null=True, blank=True, related_name="desk_events"
    )
    # Empty: every reviewer. Otherwise these user ids (and admins).
    audience = models.JSONField(default=list, blank=True)
    data = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def as_message(self) -> dict:
        return {"seq": self.id, "type": self.type, "data": self.data}
