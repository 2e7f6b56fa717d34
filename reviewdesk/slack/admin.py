"""Slack in the admin: links (seen, and removed through the audited service), the channels
a group's queue is posted to, and every message's delivery state."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages

from reviewdesk.audit.services import audit_record
from reviewdesk.lib.admin import ReadOnlyAdmin
from reviewdesk.slack.linking import link_remove
from reviewdesk.slack.models import SlackChannel, SlackLink, SlackMessage


@admin.register(SlackLink)
class SlackLinkAdmin(ReadOnlyAdmin):
    """Made only by their owner's code; an admin removes one with the action (audited)."""

    list_display = ("user", "team_id", "slack_user_id", "notify", "linked_at")
    list_select_related = ("user",)
    search_fields = ("user__username", "slack_user_id")
    actions = ["remove_links"]

    def has_remove_permission(self, request: Any) -> bool:
        return request.user.is_active and request.user.has_perm("slack.delete_slacklink")

    @admin.action(description="Remove selected links (audited)", permissions=["remove"])
    def remove_links(self, request: Any, queryset: Any) -> None:
        links = list(queryset.select_related("user"))
        for link in links:
            link_remove(link=link, by=request.user, via="admin")
        self.message_user(request, f"Removed {len(links)} link(s).", messages.SUCCESS)


@admin.register(SlackChannel)
class SlackChannelAdmin(admin.ModelAdmin):
    list_display = ("group", "channel_id", "created_at")

    def save_model(self, request: Any, obj: SlackChannel, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        audit_record(
            actor=request.user,
            action="slack.channel_set",
            subject_type="slack_channel",
            subject_id=obj.pk,
            data={"group": obj.group.name if obj.group else None, "channel": obj.channel_id},
        )

    def delete_model(self, request: Any, obj: SlackChannel) -> None:
        audit_record(
            actor=request.user,
            action="slack.channel_removed",
            subject_type="slack_channel",
            subject_id=obj.pk,
            data={"group": obj.group.name if obj.group else None, "channel": obj.channel_id},
        )
        super().delete_model(request, obj)

    def delete_queryset(self, request: Any, queryset: Any) -> None:
        for obj in queryset:
            self.delete_model(request, obj)


@admin.register(SlackMessage)
class SlackMessageAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "kind", "user", "target", "state", "stale", "attempts", "last_error")
    list_filter = ("state", "kind", "stale")
    list_select_related = ("user",)
