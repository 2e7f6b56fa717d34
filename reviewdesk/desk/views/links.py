"""The emailed one-time link: it opens the approval's page, and never decides."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET

from reviewdesk.approvals.lifecycle.links import LinkRefused, link_open

STATUS = {"forged": 400, "not_yours": 403, "used": 410, "expired": 410}


@login_required
@require_GET
def approval_link(request: HttpRequest, token: str) -> HttpResponse:
    """Spend the link (it was sent to this reviewer), then show the page; the page checks
    again who may see and decide, and deciding takes a click there."""
    try:
        approval = link_open(token=token, user=request.user)
    except LinkRefused as refused:
        return render(request, "desk/link_refused.html", {"refused": refused}, status=STATUS[refused.code])
    return redirect("approval", approval_id=approval.pk)
