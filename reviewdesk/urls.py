from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView

from reviewdesk.desk import views as desk

urlpatterns = [
    path("", desk.desk, name="desk"),
    path("approvals/<uuid:approval_id>/", desk.approval_page, name="approval"),
    path("runs/", desk.run_list, name="runs"),
    path("runs/<uuid:run_id>/", desk.run_page, name="run"),
    path("runs/<uuid:run_id>/cancel/", desk.run_control, {"action": "cancel"}, name="run-cancel"),
    path("runs/<uuid:run_id>/retry/", desk.run_control, {"action": "retry"}, name="run-retry"),
    path("audit/", desk.audit_page, name="audit"),
    # Only login and logout: password-reset tokens derive from SECRET_KEY, which
    # workers also load, so a reset view would let a compromised worker become a reviewer.
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("api/v1/", include("reviewdesk.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", desk.api_docs, name="api-docs"),
]
