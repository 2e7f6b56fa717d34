"""`/tokens/`: a user's API tokens: list them, create one (its secret shown once), revoke one.

Every token is the user's own: another user's token id answers 404 like a missing one. The
secret is rendered into the response to the POST that created it, never into a redirect's
session message, and the response is not cached: after that page it exists nowhere here."""

from __future__ import annotations

from datetime import timedelta

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from reviewdesk.accounts.models import ApiToken, Scope
from reviewdesk.accounts.services import token_create, token_revoke

# The expiries the form offers, in days (0: never). A fixed list: no date parsing to get wrong.
EXPIRY_DAYS = (0, 7, 30, 90, 365)
NAME_MAX = 100
MAX_LIVE_TOKENS = 50  # per user: enough for every client, few enough to review on one page


@never_cache
@login_required
@require_http_methods(["GET", "POST"])
def token_list(request: HttpRequest) -> HttpResponse:
    created = errors = None
    if request.method == "POST":
        created, errors = _create(request)
    tokens = ApiToken.objects.filter(user=request.user).order_by("-created_at")
    return render(
        request,
        "desk/tokens.html",
        {
            "tokens": tokens,
            "now": timezone.now(),
            "scopes": Scope.values,
            "expiry_days": EXPIRY_DAYS,
            "created": created,
            "errors": errors,
            "form": request.POST if errors else {},
        },
        status=422 if errors else 200,
    )


def _create(request: HttpRequest) -> tuple[tuple[ApiToken, str] | None, list[str] | None]:
    name = request.POST.get("name", "").strip()
    scopes = request.POST.getlist("scopes")
    errors = []
    if len(name) > NAME_MAX:
        errors.append(f"The name is at most {NAME_MAX} characters.")
    if "\x00" in name:
        errors.append("The name may not hold a NUL character.")
    if not scopes or set(scopes) - set(Scope.values):
        errors.append("Choose at least one scope: " + ", ".join(Scope.values) + ".")
    try:
        days = int(request.POST.get("expires_in_days", "0"))
    except ValueError:
        days = -1
    if days not in EXPIRY_DAYS:
        errors.append("Choose an expiry from the list.")
    live = ApiToken.objects.filter(user=request.user, revoked_at__isnull=True).count()
    if live >= MAX_LIVE_TOKENS:
        errors.append(f"You have {live} live tokens; revoke one first.")
    if errors:
        return None, errors
    expires_at = timezone.now() + timedelta(days=days) if days else None
    token, raw = token_create(
        user=request.user, scopes=scopes, name=name, by=request.user, via="tokens page", expires_at=expires_at
    )
    return (token, raw), None


@login_required
@require_http_methods(["POST"])
def token_revoke_post(request: HttpRequest, token_id: int) -> HttpResponse:
    token = ApiToken.objects.filter(pk=token_id, user=request.user).select_related("user").first()
    if token is None:  # missing, or someone else's: the same answer
        raise Http404("no such token")
    if token_revoke(token=token, by=request.user, via="tokens page"):
        messages.success(request, f"Token {token.prefix}… revoked.")
    else:
        messages.info(request, f"Token {token.prefix}… was already revoked.")
    return redirect("tokens")
