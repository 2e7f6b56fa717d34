from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from reviewdesk.api.views.schema import SchemaView
from reviewdesk.desk.views import (
    approvals,
    audit,
    docs,
    grants,
    handover,
    keys,
    links,
    preferences,
    queue,
    runs,
    threads,
    tokens,
    webhooks,
)
from reviewdesk.slack import views as slack_views

urlpatterns = [
    path("", queue.desk, name="desk"),
    path("approvals/<uuid:approval_id>/card", queue.desk_card, name="desk-card"),
    path("approvals/<uuid:approval_id>/", approvals.approval_page, name="approval"),
    path("approvals/<uuid:approval_id>/preview", approvals.approval_preview_json, name="approval-preview"),
    path("approvals/link/<str:token>/", links.approval_link, name="approval-link"),  # emailed, one use
    path(
        "approvals/<uuid:approval_id>/handover/",
        handover.approval_handover_form,
        name="approval-handover",
    ),
    path("runs/", runs.run_list, name="runs"),
    path("runs/<uuid:run_id>/", runs.run_page, name="run"),
    path("runs/<uuid:run_id>/cancel/", runs.run_control, {"action": "cancel"}, name="run-cancel"),
    path("runs/<uuid:run_id>/retry/", runs.run_control, {"action": "retry"}, name="run-retry"),
    path("runs/<uuid:run_id>/messages/", threads.run_follow_up_post, name="run-follow-up"),
    path("settings/", preferences.settings_page, name="settings"),  # one's own notifications
    path("settings/slack/code/", preferences.slack_link_post, {"action": "code"}, name="slack-link-code"),
    path(
        "settings/slack/notify/", preferences.slack_link_post, {"action": "notify"}, name="slack-link-notify"
    ),
    path("settings/slack/unlink/", preferences.slack_link_post, {"action": "unlink"}, name="slack-unlink"),
    # Slack's own requests: verified by signature, timestamp and replay (reviewdesk/slack/verify.py).
    path("slack/interactions", slack_views.interactions, name="slack-interactions"),
    path("slack/commands", slack_views.commands, name="slack-commands"),
    path("tokens/", tokens.token_list, name="tokens"),
    path("tokens/<int:token_id>/revoke/", tokens.token_revoke_post, name="token-revoke"),
    path("webhooks/", webhooks.webhook_list, name="webhooks"),
    path("webhooks/<uuid:webhook_id>/", webhooks.webhook_page, name="webhook"),
    path("webhooks/<uuid:webhook_id>/delete/", webhooks.webhook_delete_post, name="webhook-delete"),
    path(
        "webhooks/<uuid:webhook_id>/deliveries/<uuid:delivery_id>/resend/",
        webhooks.webhook_resend_post,
        name="webhook-resend",
    ),
    path("grants/", grants.grant_list, name="grants"),
    path("grants/<uuid:grant_id>/revoke/", grants.grant_revoke_page, name="grant-revoke"),
    path("audit/", audit.audit_page, name="audit"),
    # Device keys: the page, and its JSON endpoints (session + CSRF).
    path("keys/", keys.keys_page, name="keys"),
    path("keys/register", keys.key_register, name="key-register"),
    path("keys/<str:key_id>/endorse", keys.key_record_draft, {"action": "endorse"}, name="key-endorse"),
    path("keys/<str:key_id>/revoke", keys.key_record_draft, {"action": "revoke"}, name="key-revoke"),
    path("keys/<str:key_id>/records", keys.key_record_store, name="key-records"),
    path("audit/export.csv", audit.audit_export, name="audit-export"),
    path("mcp/", include("reviewdesk.mcp.urls")),  # admins review MCP tool definitions
    # Only login and logout: password-reset tokens derive from SECRET_KEY, which
    # workers also load, so a reset view would let a compromised worker become a reviewer.
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("api/v1/", include("reviewdesk.api.urls")),
    path("api/schema/", SchemaView.as_view(), name="schema"),
    path("api/docs/", docs.api_docs, name="api-docs"),
]
