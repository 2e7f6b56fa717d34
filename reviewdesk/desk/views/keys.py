"""The Keys page: a reviewer's device keys, made in the browser; an admin's
endorsements and revocations, signed in the browser by the admin's own device key.

The JSON endpoints below take session + CSRF like the page's other fetches. The server
never sees a private key: it receives public keys and signatures, and builds the records
to sign itself (`reviewdesk.accounts.devicekeys`), so the browser signs bytes it was sent.
"""

from __future__ import annotations

import base64
import json

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_http_methods

from agents.trust import record_bytes
from reviewdesk.accounts.devicekeys import (
    device_key_register,
    device_keys_for,
    endorsement_draft,
    revocation_draft,
    signed_record_store,
)
from reviewdesk.accounts.models import DeviceKey
from reviewdesk.accounts.roles import is_admin
from reviewdesk.lib.errors import DeskError
from reviewdesk.lib.limits import json_depth_exceeds, json_holds_nul

BODY_MAX = 16 * 1024


def _problem(exc: DeskError) -> JsonResponse:
    return JsonResponse({"detail": exc.detail, "code": exc.code, "errors": exc.errors}, status=exc.status)


def _body(request: HttpRequest) -> dict | None:
    if len(request.body) > BODY_MAX:
        return None
    try:
        body = json.loads(request.body)
    except (ValueError, RecursionError):  # RecursionError: nesting the decoder gave up on
        return None
    if not isinstance(body, dict) or json_depth_exceeds(body, settings.DESK_JSON_MAX_DEPTH):
        return None
    if json_holds_nul(body):  # PostgreSQL text cannot hold it: a label holding one was a 500
        return None
    return body


def _bad_body() -> JsonResponse:
    return JsonResponse(
        {"detail": "the body is a JSON object, holding no NUL character (\\u0000)", "code": "invalid"},
        status=400,
    )


@login_required
def keys_page(request: HttpRequest) -> HttpResponse:
    return render(
        request,
        "desk/keys.html",
        {"keys": device_keys_for(request.user), "is_admin": is_admin(request.user)},
    )


@login_required
@require_http_methods(["POST"])
def key_register(request: HttpRequest) -> JsonResponse:
    """{"label", "public_key": base64 raw Ed25519} → {"key_id", "fingerprint"}."""
    body = _body(request)
    if body is None:
        return _bad_body()
    try:
        key = device_key_register(
            user=request.user,
            label=str(body.get("label", "")),
            public_key=str(body.get("public_key", "")),
            by=request.user,
            via="keys page",
        )
    except DeskError as exc:
        return _problem(exc)
    return JsonResponse({"key_id": key.key_id, "fingerprint": key.fingerprint}, status=201)


def _device_key(key_id: str) -> DeviceKey | None:
    if "\x00" in key_id:  # %00 in the path: no key's id, and PostgreSQL cannot compare it (a 500)
        return None
    return DeviceKey.objects.select_related("user").filter(key_id=key_id).first()


@login_required
@require_http_methods(["POST"])
def key_record_draft(request: HttpRequest, key_id: str, action: str) -> JsonResponse:
    """{"signer_key_id"} → {"record", "bytes"}: the endorsement or revocation to sign (admins)."""
    body = _body(request)
    if body is None:
        return _bad_body()
    if not is_admin(request.user):
        return JsonResponse(
            {"detail": "only admins endorse or revoke device keys", "code": "forbidden"}, status=403
        )
    device_key = _device_key(key_id)
    if device_key is None:
        return JsonResponse({"detail": "no such device key", "code": "not_found"}, status=404)
    draft = endorsement_draft if action == "endorse" else revocation_draft
    try:
        record = draft(
            admin=request.user, device_key=device_key, signer_key_id=str(body.get("signer_key_id", ""))
        )
    except DeskError as exc:
        return _problem(exc)
    return JsonResponse({"record": record, "bytes": base64.b64encode(record_bytes(record)).decode()})


@login_required
@require_http_methods(["POST"])
def key_record_store(request: HttpRequest, key_id: str) -> JsonResponse:
    """{"record", "signature"} → 201: the signed endorsement or revocation is stored."""
    body = _body(request)
    if body is None:
        return _bad_body()
    device_key = _device_key(key_id)
    if device_key is None:
        return JsonResponse({"detail": "no such device key", "code": "not_found"}, status=404)
    try:
        signed_record_store(
            admin=request.user,
            device_key=device_key,
            record=body.get("record"),
            signature=str(body.get("signature", "")),
            by=request.user,
            via="keys page",
        )
    except DeskError as exc:
        return _problem(exc)
    return JsonResponse({"key_id": key_id}, status=201)
