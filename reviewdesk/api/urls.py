from django.urls import path

from reviewdesk.api import views

urlpatterns = [
    path("runs", views.RunListCreateView.as_view(), name="api-runs"),
    path("runs/<uuid:run_id>", views.RunDetailView.as_view(), name="api-run"),
    path("runs/<uuid:run_id>/events", views.RunEventsView.as_view(), name="api-run-events"),
    path("approvals", views.ApprovalListView.as_view(), name="api-approvals"),
    path("approvals/<uuid:approval_id>", views.ApprovalDetailView.as_view(), name="api-approval"),
    path("approvals/<uuid:approval_id>/decision", views.ApprovalDecisionView.as_view(), name="api-decision"),
]
