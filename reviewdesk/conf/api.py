"""The API's framework configuration (DRF and drf-spectacular), read by reviewdesk/settings.py.

Plain data and dotted paths only: settings import it before Django is set up."""

from __future__ import annotations

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "reviewdesk.accounts.authentication.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["reviewdesk.api.parsers.LimitedJSONParser"],
    "EXCEPTION_HANDLER": "reviewdesk.api.errors.problem_exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Review Desk API",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # request and response shapes apart (a read-only field is not a request field);
    # the hook adds the error-code list, problem+json media types and the SSE streams.
    "COMPONENT_SPLIT_REQUEST": True,
    # Choice sets a second field shares, named once (external runs: a run's kind beside an
    # approval's, the verdicts an external call lists beside a decision's verdict).
    # The names they had before the second field came: ApprovalOut's and RunOut's statuses.
    "ENUM_NAME_OVERRIDES": {
        "RunKindEnum": ["internal", "external"],
        "KeyStatusEnum": ["active", "retired"],
        "ApprovalOutStatusEnum": ["pending", "approved", "rejected", "expired", "cancelled"],
        "RunOutStatusEnum": ["queued", "running", "input_required", "succeeded", "failed", "cancelled"],
    },
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "reviewdesk.api.schema_document.postprocess",
    ],
}
