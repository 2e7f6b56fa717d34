from django.urls import path, re_path

from reviewdesk.api.throttling import DecideThrottle, ResendThrottle, SubmitThrottle
from reviewdesk.api.views import (
    agents,
    approvals,
    audit,
    base,
    external,
    grants,
    payloads,
    runs,
    threads,
    webhooks,
)

urlpatterns = [
    path("runs", runs.RunListCreateView.as_view(throttle_classes=[SubmitThrottle]), name="api-runs"),
    path("runs/<uuid:run_id>", runs.RunDetailView.as_view(), name="api-run"),
    path("runs/<uuid:run_id>/events", runs.RunEventsView.as_view(), name="api-run-events"),
    path("runs/<uuid:run_id>/cancel", runs.RunCancelView.as_view(), name="api-run-cancel"),
    path("runs/<uuid:run_id>/retry", runs.RunRetryView.as_view(), name="api-run-retry"),
    path(
        "runs/<uuid:run_id>/messages",
        threads.RunMessagesView.as_view(throttle_classes=[SubmitThrottle]),
        name="api-run-messages",
    ),
    path("runs/<uuid:run_id>/report", external.RunReportView.as_view(), name="api-run-report"),
    path("approvals", approvals.ApprovalListView.as_view(), name="api-approvals"),
    path("approvals/<uuid:approval_id>", approvals.ApprovalDetailView.as_view(), name="api-approval"),
    path(
        "approvals/<uuid:approval_id>/decision",
        approvals.ApprovalDecisionView.as_view(throttle_classes=[DecideThrottle]),
        name="api-decision",
    ),
    path(
        "approvals/<uuid:approval_id>/payload",
        payloads.ApprovalPayloadView.as_view(),
        name="api-decision-payload",
    ),
    path(
        "approvals/<uuid:approval_id>/consume",
        external.ApprovalConsumeView.as_view(throttle_classes=[DecideThrottle]),
        name="api-consume",
    ),
    # External runs: an agent framework's gated calls; the keys its decisions verify with
    path(
        "external/approvals",
        external.ExternalApprovalsView.as_view(throttle_classes=[SubmitThrottle]),
        name="api-external-approvals",
    ),
    path("keys", external.KeysView.as_view(), name="api-keys"),
    path(
        "approvals/<uuid:approval_id>/handover",
        approvals.ApprovalHandoverView.as_view(throttle_classes=[DecideThrottle]),
        name="api-handover",
    ),
    # Standing grants
    path("grants", grants.GrantListView.as_view(), name="api-grants"),
    path("grants/<uuid:grant_id>/revoke", grants.GrantRevokeView.as_view(), name="api-grant-revoke"),
    # Webhooks
    path("webhooks", webhooks.WebhookListCreateView.as_view(), name="api-webhooks"),
    path(
        "webhooks/<uuid:webhook_id>/deliveries",
        webhooks.WebhookDeliveriesView.as_view(),
        name="api-webhook-deliveries",
    ),
    path(
        "webhooks/<uuid:webhook_id>/deliveries/<uuid:delivery_id>/resend",
        webhooks.WebhookResendView.as_view(throttle_classes=[ResendThrottle]),
        name="api-webhook-resend",
    ),
    # The loaded agents and their tools
    path("agents", agents.AgentListView.as_view(), name="api-agents"),
    path("agents/<str:name>", agents.AgentDetailView.as_view(), name="api-agent"),
    # The audit trail (admins, `audit` scope)
    path("audit", audit.AuditListView.as_view(), name="api-audit"),
    re_path(r"^.*$", base.api_not_found),
]
