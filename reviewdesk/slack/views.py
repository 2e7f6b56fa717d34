"""The two URLs Slack calls: interactions (button clicks, the reject dialog) and the `/desk`
command (linking). Neither has a session or a CSRF token: each request is verified as Slack's
(verify.py) before its body is read, and refused with 401 otherwise."""

from __future__ import annotations

import json
import logging

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from reviewdesk.slack.interactions import command_handle, interaction_handle
from reviewdesk.slack.verify import NotFromSlack, request_verify

logger = logging.getLogger(__name__)


def _refused(exc: NotFromSlack) -> HttpResponse:
    logger.warning("slack request refused: %s", exc.reason)
    return HttpResponse(f"refused: {exc.reason}", status=401, content_type="text/plain")


@csrf_exempt
@require_POST
def interactions(request: HttpRequest) -> HttpResponse:
    try:
        request_verify(request)
    except NotFromSlack as exc:
        return _refused(exc)
    try:
        payload = json.loads(request.POST.get("payload", ""))
    except ValueError:
        return HttpResponse("no payload", status=400, content_type="text/plain")
    if not isinstance(payload, dict):
        return HttpResponse("no payload", status=400, content_type="text/plain")
    answer = interaction_handle(payload)
    return JsonResponse(answer) if answer is not None else HttpResponse(status=200)


@csrf_exempt
@require_POST
def commands(request: HttpRequest) -> HttpResponse:
    try:
        request_verify(request)
    except NotFromSlack as exc:
        return _refused(exc)
    return JsonResponse(command_handle({k: request.POST.get(k, "") for k in ("text", "team_id", "user_id")}))
