"""Slack as a place to decide (docs/slack.md): who is who, what was posted where, and the
interaction requests already seen.

A Slack user acts on the desk only through a `SlackLink`, made by a one-time code that the
desk shows to its signed-in owner and that the Slack user sends back through a signed
request: both sides proven, nobody matched by name or email."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models


class SlackLink(models.Model):
    """One desk account <-> one Slack user (of one workspace)."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="slack_link")
    team_id = models.CharField(max_length=32)
    slack_user_id = models.CharField(max_length=32)
    linked_at = models.DateTimeField(auto_now_add=True)
    # What the desk would mail its owner (per item or as a digest, as /settings/ says) goes to
    # Slack instead; off: mail, and Slack only for a group's channel posts.
    notify = models.BooleanField(default=True)

    class Meta:
        constraints = [
            # A Slack user id is one person whichever workspace's payload names it: linked to
            # one account, or a click's account would hang on which team id the payload carried.
            models.UniqueConstraint(fields=["slack_user_id"], name="slack_user_linked_once"),
        ]

    def __str__(self) -> str:
        return f"{self.user} <-> {self.team_id}/{self.slack_user_id}"


class SlackLinkCode(models.Model):
    """A code shown once on `/settings/`; only its SHA-256 is kept. It links whoever sends it
    from Slack before `expires_at`, once (`used_at` is its compare-and-set)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    code_sha256 = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)


class SlackChannel(models.Model):
    """Where an admin wants a group's queue posted: each item the group may decide (or, with no
    group, each item open to every reviewer) is posted to `channel_id` when it is announced.
    The buttons still act only for the linked person who clicks, by the desk's rules."""

    group = models.OneToOneField(
        "auth.Group", on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    channel_id = models.CharField(max_length=32)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            # One row for "items open to every reviewer" (NULLs are distinct in a unique index).
            models.UniqueConstraint(
                fields=["channel_id"], condition=models.Q(group__isnull=True), name="slack_open_queue_once"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.group or 'every reviewer'} -> {self.channel_id}"


class MessageKind(models.TextChoices):
    ITEM = "item"  # one item, to one reviewer (a mail at once's stand-in)
    DIGEST = "digest"  # several items, to one reviewer (a digest's)
    CHANNEL = "channel"  # one item, to a group's channel


class MessageState(models.TextChoices):
    PENDING = "pending"  # not posted yet: due at `due_at`
    SENT = "sent"  # posted: `channel` and `ts` name it
    EMAILED = "emailed"  # could not be posted after every attempt: its reviewer was mailed instead
    FAILED = "failed"  # could not be posted, and there was nobody to mail (a channel post)


class SlackMessage(models.Model):
    """A message about one or more items, and its delivery state (shown to admins on each
    item's page). `stale`: an item it shows has changed since it was last drawn, so it is to be
    updated (with backoff, as a post is) until Slack has taken the update."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    kind = models.CharField(max_length=10, choices=MessageKind.choices)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    occasion = models.CharField(max_length=20, blank=True)
    # Where it is posted: a Slack user id (a direct message from the app) or a channel id; once
    # posted, the channel Slack answered with (a DM's "D…"), which updates must name.
    target = models.CharField(max_length=32)
    channel = models.CharField(max_length=32, blank=True)
    ts = models.CharField(max_length=32, blank=True)
    state = models.CharField(max_length=10, choices=MessageState.choices, default=MessageState.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    due_at = models.DateTimeField()
    # Set while a worker posts or updates it: a duplicate task finds it and leaves it.
    leased_until = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    stale = models.BooleanField(default=False)
    # Moved by every change to an item it shows: a redraw clears `stale` only if no change came
    # after the one it drew (compared here, not by two hosts' clocks).
    revision = models.PositiveIntegerField(default=0)
    # A digest that could not list every item waiting: it says more wait on the desk.
    more = models.BooleanField(default=False)
    update_attempts = models.PositiveSmallIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at"]
        indexes = [models.Index(fields=["state", "due_at"]), models.Index(fields=["stale", "due_at"])]


class SlackMessageItem(models.Model):
    message = models.ForeignKey(SlackMessage, on_delete=models.CASCADE, related_name="items")
    request = models.ForeignKey("approvals.ApprovalRequest", on_delete=models.CASCADE, related_name="+")
    position = models.PositiveSmallIntegerField(default=0)

    class Meta:
        ordering = ["position"]
        constraints = [models.UniqueConstraint(fields=["message", "request"], name="slack_item_once")]


class SlackRequestSeen(models.Model):
    """A signed interaction request already taken: the same signature again is a replay, refused.
    Kept for the signature's window (older ones fail the timestamp check anyway)."""

    signature_sha256 = models.CharField(max_length=64, unique=True)
    seen_at = models.DateTimeField(db_index=True)
