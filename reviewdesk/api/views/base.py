"""What every API view shares: the body-size check before a body is read, and the problem+json
404 for a path no view serves."""

from __future__ import annotations

from django.conf import settings
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework.views import APIView

from reviewdesk.api.parsers import body_too_large
from reviewdesk.lib.numbers import HEADER_DIGITS, whole_number


class DeskAPIView(APIView):
    """Refuses a body over DESK_MAX_BODY_BYTES by its Content-Length, before reading it."""

    def initial(self, request, *args, **kwargs):
        length = whole_number(request.META.get("CONTENT_LENGTH") or "0", digits=HEADER_DIGITS)
        if length is not None and length > settings.DESK_MAX_BODY_BYTES:
            raise body_too_large(length)
        super().initial(request, *args, **kwargs)


@csrf_exempt  # it changes nothing; without this a POST got Django's HTML 403 CSRF page
def api_not_found(request, *args, **kwargs):
    """Unknown API paths and malformed ids answer in problem+json, like every other API error."""

    return JsonResponse(
        {
            "type": "about:blank",
            "title": "Not found",
            "status": 404,
            "detail": f"no such endpoint: {request.path}",
            "code": "not_found",
        },
        status=404,
        content_type="application/problem+json",
    )
