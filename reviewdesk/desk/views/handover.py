"""The approval page's hand-over form: parse, call the hand-over service, say what happened."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_http_methods

from reviewdesk.accounts.roles import is_reviewer
from reviewdesk.approvals.lifecycle.handover import approval_handover
from reviewdesk.lib.errors import DeskError, NotFound, explain


@login_required
@require_http_methods(["POST"])
def approval_handover_form(request: HttpRequest, approval_id) -> HttpResponse:
    if not is_reviewer(request.user):
        raise PermissionDenied("only reviewers hand approvals over")
    to = request.POST.get("to", "").strip()
    try:
        approval = approval_handover(
            approval_id=approval_id, by=request.user, to=to, note=request.POST.get("note", "").strip()
        )
    except NotFound:
        raise Http404("no such approval") from None
    except DeskError as exc:
        messages.error(request, f"Not handed over: {explain(exc)}")
        return redirect("approval", approval_id=approval_id)
    messages.success(request, f"Handed {approval.tool} for run {approval.run_id} over to {to}.")
    return redirect("desk")
