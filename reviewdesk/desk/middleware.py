"""A page's form over DESK_MAX_BODY_BYTES is 413, the API's limit, before anything reads it.

Without this, Django reads up to DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MiB) and answers a larger
form with a bare 400. The API refuses by Content-Length itself, with problem+json (api/views/base.py, DeskAPIView)."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse

from reviewdesk.lib.numbers import HEADER_DIGITS, whole_number


class BodyLimitMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path.startswith("/api/"):
            return self.get_response(request)
        length = whole_number(request.META.get("CONTENT_LENGTH") or "", digits=HEADER_DIGITS)
        if length is not None and length > settings.DESK_MAX_BODY_BYTES:
            detail = f"the form is {length} bytes; the limit is {settings.DESK_MAX_BODY_BYTES}"
            if request.headers.get("Accept", "").startswith("application/json"):
                return JsonResponse({"detail": detail, "code": "body_too_large"}, status=413)
            return HttpResponse(f"Too large: {detail}.", status=413, content_type="text/plain; charset=utf-8")
        return self.get_response(request)
