"""`/settings/`: a reviewer's own notification settings (accounts/preferences.py).

The page edits only the settings of whoever asks (`request.user`): no URL names a user, so
there is no one else's to reach. Changes are audited by the service."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from reviewdesk.accounts.models import NotifyMode
from reviewdesk.accounts.preferences import (
    DIGEST_MINUTES_MAX,
    DIGEST_MINUTES_MIN,
    preference_of,
    preference_parse,
    preference_update,
)


@login_required
@require_http_methods(["GET", "POST"])
def settings_page(request: HttpRequest) -> HttpResponse:
    preference = preference_of(request.user)
    errors: list[str] = []
    form = None
    if request.method == "POST":
        change = preference_parse(request.POST)
        if not change.errors:
            preference_update(user=request.user, change=change, via="settings page")
            messages.success(request, "Your notification settings are saved.")
            return redirect("settings")
        errors, form = change.errors, change.values
        form["digest_minutes"] = request.POST.get("digest_minutes", "")
    shown = form or {
        "mode": preference.mode,
        "digest_minutes": "" if preference.digest_minutes is None else preference.digest_minutes,
        "immediate_assigned": preference.immediate_assigned,
        "immediate_expiring": preference.immediate_expiring,
    }
    return render(
        request,
        "desk/settings.html",
        {
            "form": shown,
            "errors": errors,
            "modes": NotifyMode.choices,
            "default_minutes": settings.DESK_NOTIFY_DIGEST_MINUTES,
            "minutes_min": DIGEST_MINUTES_MIN,
            "minutes_max": DIGEST_MINUTES_MAX,
            "expiring_minutes": settings.DESK_NOTIFY_EXPIRING_SECONDS // 60,
            "email": request.user.email,
        },
        status=422 if errors else 200,
    )
