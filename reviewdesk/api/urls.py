from django.urls import path, re_path

from reviewdesk.api import views

urlpatterns = [
    path("runs", views.RunListCreateView.as_view(), name="api-runs"),
    path("runs/<uuid:run_id>", views.RunDetailView.as_view(), name="api-run"),
    path("runs/<uuid:run_id>/events", views.RunEventsView.as_view(), name="api-run-events"),
    path("runs/<uuid:run_id>/cancel", views.RunCancelView.as_view(), name="api-run-cancel"),
    path("runs/<uuid:run_id>/retry", views.RunRetryView.as_view(), name="api-run-retry"),
    path("approvals", views.ApprovalListView.as_view(), name="api-approvals"),
    path("approvals/<uuid:approval_id>", views.ApprovalDetailView.as_view(), name="api-approval"),
    path("approvals/<uuid:approval_id>/decision", views.ApprovalDecisionView.as_view(), name="api-decision"),
    re_path(r"^.*$", views.api_not_found),
]
