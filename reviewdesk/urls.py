from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from reviewdesk.api.schema_view import SchemaView
from reviewdesk.desk import (
    audit_views,
    grant_views,
    handover_views,
    key_views,
    link_views,
    run_views,
    thread_views,
    token_views,
    webhook_views,
)
from reviewdesk.desk import views as desk

urlpatterns = [
    path("", desk.desk, name="desk"),
    path("approvals/<uuid:approval_id>/", desk.approval_page, name="approval"),
    path("approvals/<uuid:approval_id>/preview", desk.approval_preview_json, name="approval-preview"),
    path("approvals/link/<str:token>/", link_views.approval_link, name="approval-link"),  # emailed, one use
    path(
        "approvals/<uuid:approval_id>/handover/",
        handover_views.approval_handover_form,
        name="approval-handover",
    ),
    path("runs/", run_views.run_list, name="runs"),
    path("runs/<uuid:run_id>/", run_views.run_page, name="run"),
    path("runs/<uuid:run_id>/cancel/", run_views.run_control, {"action": "cancel"}, name="run-cancel"),
    path("runs/<uuid:run_id>/retry/", run_views.run_control, {"action": "retry"}, name="run-retry"),
    path("runs/<uuid:run_id>/messages/", thread_views.run_follow_up_post, name="run-follow-up"),
    path("tokens/", token_views.token_list, name="tokens"),
    path("tokens/<int:token_id>/revoke/", token_views.token_revoke_post, name="token-revoke"),
    path("webhooks/", webhook_views.webhook_list, name="webhooks"),
    path("webhooks/<uuid:webhook_id>/", webhook_views.webhook_page, name="webhook"),
    path("webhooks/<uuid:webhook_id>/delete/", webhook_views.webhook_delete_post, name="webhook-delete"),
    path(
        "webhooks/<uuid:webhook_id>/deliveries/<uuid:delivery_id>/resend/",
        webhook_views.webhook_resend_post,
        name="webhook-resend",
    ),
    path("grants/", grant_views.grant_list, name="grants"),
    path("grants/<uuid:grant_id>/revoke/", grant_views.grant_revoke_page, name="grant-revoke"),
    path("audit/", audit_views.audit_page, name="audit"),
    # Device keys (issue 13): the page, and its JSON endpoints (session + CSRF).
    path("keys/", key_views.keys_page, name="keys"),
    path("keys/register", key_views.key_register, name="key-register"),
    path("keys/<str:key_id>/endorse", key_views.key_record_draft, {"action": "endorse"}, name="key-endorse"),
    path("keys/<str:key_id>/revoke", key_views.key_record_draft, {"action": "revoke"}, name="key-revoke"),
    path("keys/<str:key_id>/records", key_views.key_record_store, name="key-records"),
    path("audit/export.csv", audit_views.audit_export, name="audit-export"),  # issue 9
    # Only login and logout: password-reset tokens derive from SECRET_KEY, which
    # workers also load, so a reset view would let a compromised worker become a reviewer.
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("api/v1/", include("reviewdesk.api.urls")),
    path("api/schema/", SchemaView.as_view(), name="schema"),
    path("api/docs/", desk.api_docs, name="api-docs"),
]
