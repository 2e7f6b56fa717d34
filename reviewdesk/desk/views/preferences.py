"""`/settings/`: a reviewer's own notification settings (accounts/preferences.py), and their
link to Slack (reviewdesk/slack/linking.py) when the desk has Slack.

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
from reviewdesk.slack.client import slack_enabled
from reviewdesk.slack.linking import link_code_create, link_notify_set, link_remove
from reviewdesk.slack.models import SlackLink


@login_required
@require_http_methods(["GET", "POST"])
def settings_page(request: HttpRequest) -> HttpResponse:
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
    return _settings_render(request, form=form, errors=errors)


def _settings_render(
    request: HttpRequest, *, form: dict | None = None, errors: list[str] | None = None, slack_code: str = ""
) -> HttpResponse:
    preference = preference_of(request.user)
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
            "slack": _slack_context(request, slack_code),
        },
        status=422 if errors else 200,
    )


def _slack_context(request: HttpRequest, code: str) -> dict | None:
    if not slack_enabled():
        return None
    return {
        "link": SlackLink.objects.filter(user=request.user).first(),
        "code": code,
        "minutes": settings.DESK_SLACK_LINK_CODE_SECONDS // 60,
    }


@login_required
@require_http_methods(["POST"])
def slack_link_post(request: HttpRequest, action: str) -> HttpResponse:
    """The Slack section's buttons, each on the asker's own link only: show a new code (the
    page is drawn with it, never put in a URL or a message that outlives it), stop or start
    notifications there, unlink."""
    if not slack_enabled():
        messages.error(request, "This desk has no Slack app configured.")
        return redirect("settings")
    link = SlackLink.objects.filter(user=request.user).first()
    if action == "code":
        if link is not None:
            messages.error(
                request, "Your account is linked already: unlink it first to link another Slack user."
            )
            return redirect("settings")
        response = _settings_render(request, slack_code=link_code_create(user=request.user))
        response["Cache-Control"] = "no-store"
        return response
    if link is None:
        messages.error(request, "Your account is not linked to Slack.")
    elif action == "unlink":
        link_remove(link=link, by=request.user, via="settings page")
        messages.success(
            request, "Unlinked: Slack clicks no longer act for you, and the desk mails you again."
        )
    else:
        on = request.POST.get("notify") == "on"
        link_notify_set(link=link, notify=on, by=request.user)
        messages.success(
            request,
            "Notifications now come to you in Slack." if on else "Notifications now come to you by mail.",
        )
    return redirect("settings")
