"""Every API error as application/problem+json (RFC 9457), from one handler.

Each problem carries a `code` from `reviewdesk.lib.errors.ERROR_CODES`; DRF's own
exceptions (authentication, parsing, methods) are mapped onto that list here.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import RequestDataTooBig
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import exception_handler

from reviewdesk.lib.errors import ERROR_CODES, FIELD_ERRORS_DETAIL, DeskError

PROBLEM_CONTENT_TYPE = "application/problem+json"

# RFC 9110's names; Python's http module still says "Unprocessable Entity" and
# "Request Entity Too Large" (daphne's twisted knows neither 422 nor 429: see asgi.py).
REASON_PHRASES = {413: "Content Too Large", 422: "Unprocessable Content", 429: "Too Many Requests"}

TITLES = {
    400: "Malformed request",
    401: "Not authenticated",
    403: "Not allowed",
    404: "Not found",
    405: "Method not allowed",
    406: "Not acceptable",
    409: "Conflict",
    410: "Gone",
    413: "Content too large",
    415: "Unsupported media type",
    422: "Invalid input",
    429: "Too many requests",
}

# DRF's exception codes → ours. A ParseError raised by our parser already says which.
DRF_CODES = {
    "parse_error": "malformed_json",
    "not_authenticated": "not_authenticated",
    "authentication_failed": "authentication_failed",
    "permission_denied": "forbidden",
    "not_found": "not_found",
    "method_not_allowed": "method_not_allowed",
    "not_acceptable": "not_acceptable",
    "unsupported_media_type": "unsupported_media_type",
    "throttled": "throttled",
}


def problem(status_code: int, title: str, detail: str, *, code: str, errors: Any = None) -> Response:
    body: dict[str, Any] = {
        "type": "about:blank",
        "title": title,
        "status": status_code,
        "detail": detail,
        "code": code,
    }
    if errors:
        body["errors"] = errors
    response = Response(body, status=status_code, content_type=PROBLEM_CONTENT_TYPE)
    if status_code in REASON_PHRASES:
        response.reason_phrase = REASON_PHRASES[status_code]
    return response


def problem_exception_handler(exc, context) -> Response | None:
    if isinstance(exc, DeskError):
        return problem(exc.status, exc.title, exc.detail, code=exc.code, errors=exc.errors)
    if isinstance(exc, RequestDataTooBig):  # Django's own limit (DATA_UPLOAD_MAX_MEMORY_SIZE)
        return problem(413, TITLES[413], "the request body is too large", code="body_too_large")
    if isinstance(exc, exceptions.ValidationError):
        return problem(
            422,
            TITLES[422],
            FIELD_ERRORS_DETAIL,
            code="invalid",
            errors=exc.detail,
        )
    response = exception_handler(exc, context)
    if response is None:
        return None  # an unexpected error: Django's 500 handling and logging take over
    detail = exc.detail if isinstance(exc, exceptions.APIException) else ""
    drf_code = getattr(detail, "code", None) or getattr(exc, "default_code", "")
    code = drf_code if drf_code in ERROR_CODES else DRF_CODES.get(drf_code, "")
    if not code:
        code = next(c for c, (status, _) in ERROR_CODES.items() if status == response.status_code)
    result = problem(response.status_code, TITLES.get(response.status_code, "Error"), str(detail), code=code)
    for header in ("WWW-Authenticate", "Allow", "Retry-After"):
        if header in response:
            result[header] = response[header]
    return result
