from django.urls import path, re_path

from reviewdesk.api import audit_views, grant_views, payload_views, thread_views, views, webhook_views
from reviewdesk.api.throttling import DecideThrottle, ResendThrottle, SubmitThrottle

urlpatterns = [
    path("runs", views.RunListCreateView.as_view(throttle_classes=[SubmitThrottle]), name="api-runs"),
    path("runs/<uuid:run_id>", views.RunDetailView.as_view(), name="api-run"),
    path("runs/<uuid:run_id>/events", views.RunEventsView.as_view(), name="api-run-events"),
    path("runs/<uuid:run_id>/cancel", views.RunCancelView.as_view(), name="api-run-cancel"),
    path("runs/<uuid:run_id>/retry", views.RunRetryView.as_view(), name="api-run-retry"),
    path(
        "runs/<uuid:run_id>/messages",
        thread_views.RunMessagesView.as_view(throttle_classes=[SubmitThrottle]),
        name="api-run-messages",
    ),
    path("approvals", views.ApprovalListView.as_view(), name="api-approvals"),
    path("approvals/<uuid:approval_id>", views.ApprovalDetailView.as_view(), name="api-approval"),
    path(
        "approvals/<uuid:approval_id>/decision",
        views.ApprovalDecisionView.as_view(throttle_classes=[DecideThrottle]),
        name="api-decision",
    ),
    path(
        "approvals/<uuid:approval_id>/payload",
        payload_views.ApprovalPayloadView.as_view(),
        name="api-decision-payload",
    ),
    path(
        "approvals/<uuid:approval_id>/handover",
        views.ApprovalHandoverView.as_view(throttle_classes=[DecideThrottle]),
        name="api-handover",
    ),
    # Standing grants (issue 10)
    path("grants", grant_views.GrantListView.as_view(), name="api-grants"),
    path("grants/<uuid:grant_id>/revoke", grant_views.GrantRevokeView.as_view(), name="api-grant-revoke"),
    # Webhooks (issue 12)
    path("webhooks", webhook_views.WebhookListCreateView.as_view(), name="api-webhooks"),
    path(
        "webhooks/<uuid:webhook_id>/deliveries",
        webhook_views.WebhookDeliveriesView.as_view(),
        name="api-webhook-deliveries",
    ),
    path(
        "webhooks/<uuid:webhook_id>/deliveries/<uuid:delivery_id>/resend",
        webhook_views.WebhookResendView.as_view(throttle_classes=[ResendThrottle]),
        name="api-webhook-resend",
    ),
    # The audit trail (admins, `audit` scope)
    path("audit", audit_views.AuditListView.as_view(), name="api-audit"),
    re_path(r"^.*$", views.api_not_found),
]
