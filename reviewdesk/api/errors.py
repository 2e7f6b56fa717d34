"""Every API error as application/problem+json (RFC 9457), from one handler."""

from __future__ import annotations

from typing import Any

from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler

from reviewdesk.errors import DeskError

PROBLEM_CONTENT_TYPE = "application/problem+json"


def problem(status_code: int, title: str, detail: str, *, code: str = "", errors: Any = None) -> Response:
    body: dict[str, Any] = {"type": "about:blank", "title": title, "status": status_code, "detail": detail}
    if code:
        body["code"] = code
    if errors:
        body["errors"] = errors
    return Response(body, status=status_code, content_type=PROBLEM_CONTENT_TYPE)


def problem_exception_handler(exc, context) -> Response | None:
    if isinstance(exc, DeskError):
        return problem(exc.status, exc.title, exc.detail, code=exc.code, errors=exc.errors)
    if isinstance(exc, exceptions.ValidationError):
        return problem(
            status.HTTP_422_UNPROCESSABLE_ENTITY,
            "Invalid input",
            "the request body does not match what this endpoint accepts",
            code="invalid",
            errors=exc.detail,
        )
    response = exception_handler(exc, context)
    if response is None:
        return None  # an unexpected error: Django's 500 handling and logging take over
    detail = response.data.get("detail", "") if isinstance(response.data, dict) else str(response.data)
    titles = {
        400: "Malformed request",
        401: "Not authenticated",
        403: "Not allowed",
        404: "Not found",
        405: "Method not allowed",
    }
    result = problem(
        response.status_code,
        titles.get(response.status_code, "Error"),
        str(detail),
        code=getattr(detail, "code", "") or "",
    )
    for header in ("WWW-Authenticate", "Allow", "Retry-After"):
        if header in response:
            result[header] = response[header]
    return result
