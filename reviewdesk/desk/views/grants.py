"""The grants page (list, revoke) and the approval page's "always allow" fields.

The fields only parse: the decide service (approvals.grants.create.grant_check_input) judges the
grant exactly as it judges one sent to the API.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from agents.tools import Tool
from reviewdesk.accounts.roles import group_names_of, is_admin, is_reviewer, remember_group_names
from reviewdesk.approvals.grants.access import (
    GRANT_STATUSES,
    grant_filter_status,
    grant_may_revoke,
    grant_revoke,
    grant_status,
    grants_visible_to,
)
from reviewdesk.approvals.grants.create import grant_target_of_external, grant_target_of_tool
from reviewdesk.approvals.models import ApprovalKind, ApprovalRequest
from reviewdesk.approvals.signing import device_decision_required
from reviewdesk.desk.paging import paged
from reviewdesk.lib.errors import DeskError, Invalid, NotFound
from reviewdesk.lib.limits import json_holds_nul

if TYPE_CHECKING:
    from django.contrib.auth.models import User

# The durations the form offers, in hours (the service caps them at DESK_GRANT_MAX_SECONDS).
GRANT_DURATIONS = ((1, "1 hour"), (8, "8 hours"), (24, "1 day"), (168, "1 week"), (720, "30 days"))


def grant_form_context(user: User, approval: ApprovalRequest, tool: Tool | None) -> dict[str, Any]:
    """What the approval page needs to offer a grant with an approve."""
    longest = settings.DESK_GRANT_MAX_SECONDS // 3600
    external = approval.run.is_external
    target = grant_target_of_external(approval) if external else grant_target_of_tool(tool) if tool else None
    return {
        "grantable": bool(
            target
            and target.accepts_grants
            and approval.kind == ApprovalKind.TOOL_CALL
            and not device_decision_required(agent=approval.run.agent, tool=target.name)
        ),
        # An external call grants for its run or its framework's agent only (grants.create).
        "grant_may_be_global": is_admin(user) and not external,
        "grant_durations": [(h, label) for h, label in GRANT_DURATIONS if h <= longest],
        "grant_default_uses": settings.DESK_GRANT_DEFAULT_USES,
        "grant_max_uses": settings.DESK_GRANT_MAX_USES,
    }


def posted_grant(request: HttpRequest) -> dict[str, Any] | None:
    """The form's grant as the API's `grant` object, or None when "Grant ahead of time" is off."""
    if request.POST.get("grant") != "on":
        return None
    grant: dict[str, Any] = {"scope": request.POST.get("grant_scope", "")}
    if request.POST.get("grant_match") == "constraints":
        try:
            grant["match"] = json.loads(request.POST.get("grant_constraints", ""))
        except (json.JSONDecodeError, RecursionError):
            raise Invalid("the grant's constraints are not valid JSON") from None
        if json_holds_nul(grant["match"]):  # PostgreSQL cannot store it: a 500 on the insert
            raise Invalid("the grant's constraints may not hold a NUL character (\\u0000)")
    try:
        hours = int(request.POST.get("grant_hours", "24"))
        grant["max_uses"] = int(request.POST.get("grant_max_uses", settings.DESK_GRANT_DEFAULT_USES))
    except ValueError:
        raise Invalid("the grant's duration and use limit are whole numbers") from None
    if hours not in {h for h, _ in GRANT_DURATIONS}:
        raise Invalid("choose one of the offered durations")
    grant["expires_at"] = (timezone.now() + timedelta(hours=hours)).isoformat()
    return grant


@login_required
def grant_list(request: HttpRequest) -> HttpResponse:
    """Every grant, newest first, with its uses, expiry, scope and match; a page at a time."""
    # Read once for the request: each row's Revoke check asks whether the user is a reviewer.
    remember_group_names(request.user, group_names_of(request.user))
    if not (is_reviewer(request.user) or is_admin(request.user)):
        raise PermissionDenied("grants are for reviewers")
    kept = {"status": request.GET.get("status", "")} if request.GET.get("status") in GRANT_STATUSES else {}
    grants = grants_visible_to(request.user).order_by("-created_at", "-id")
    if kept:
        grants = grant_filter_status(grants, kept["status"])
    page = paged(request, grants, kept)
    rows = [
        {
            "grant": g,
            "status": grant_status(g),
            "may_revoke": g.revoked_at is None and grant_may_revoke(request.user, g),
        }
        for g in page["rows"]
    ]
    return render(
        request,
        "desk/grants.html",
        {"page": page, "rows": rows, "filters": kept, "statuses": GRANT_STATUSES},
    )


@login_required
@require_http_methods(["POST"])
def grant_revoke_page(request: HttpRequest, grant_id: Any) -> HttpResponse:
    """The grants page's Revoke button (session + CSRF); the service checks owner or admin."""
    try:
        grant = grant_revoke(grant_id=grant_id, user=request.user)
    except NotFound:
        raise Http404("no such grant") from None
    except DeskError as exc:
        messages.error(request, f"Not revoked: {exc.detail}")
    else:
        messages.success(request, f"Revoked the grant for {grant.tool}: it allows nothing more.")
    return redirect("grants")
