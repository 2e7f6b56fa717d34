"""Server-rendered pages. Each view: check who asks, fetch, call one service, render."""

from __future__ import annotations

import json

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_http_methods

from agents.canonical import canonical_json
from reviewdesk.accounts.roles import is_admin, is_reviewer
from reviewdesk.approvals.selectors import approval_get_for_reviewer, approvals_pending_for, user_may_decide
from reviewdesk.approvals.services import approval_decide
from reviewdesk.audit.models import AuditEvent
from reviewdesk.audit.services import audit_verify
from reviewdesk.errors import DeskError, Invalid, NotFound
from reviewdesk.events.builders import approval_data
from reviewdesk.events.services import latest_seq
from reviewdesk.runs.models import ENDED
from reviewdesk.runs.selectors import run_get_for_user, runs_visible_to
from reviewdesk.runs.services import run_cancel, run_retry


def _require_reviewer(request: HttpRequest) -> None:
    if not (is_reviewer(request.user) or is_admin(request.user)):
        raise PermissionDenied("the desk is for reviewers")


@login_required
def desk(request: HttpRequest) -> HttpResponse:
    _require_reviewer(request)
    approvals = [approval_data(a) for a in approvals_pending_for(request.user)]
    return render(request, "desk/desk.html", {"approvals": approvals, "seq": latest_seq()})


@login_required
@require_http_methods(["GET", "POST"])
def approval_page(request: HttpRequest, approval_id) -> HttpResponse:
    _require_reviewer(request)
    try:
        approval = approval_get_for_reviewer(approval_id=approval_id, user=request.user)
    except NotFound:
        raise Http404("no such approval") from None
    if request.method == "POST":
        verdict = request.POST.get("verdict", "")
        try:
            approval_decide(
                approval_id=approval.id,
                reviewer=request.user,
                verdict=verdict,
                reason=request.POST.get("reason", "").strip(),
                note=request.POST.get("note", "").strip(),
                external_ref=request.POST.get("external_ref", "").strip(),
                arguments=_edited_arguments(request) if verdict == "edit" else None,
                checkpoint_id=request.POST.get("checkpoint_id", ""),
            )
        except DeskError as exc:
            detail = exc.detail + (
                "".join(f" {e}." for e in exc.errors) if isinstance(exc.errors, list) else ""
            )
            messages.error(request, f"Not decided: {detail}")
            return redirect("approval", approval_id=approval.id)
        done = {
            "approve": "Approved",
            "reject": "Rejected",
            "edit": "Edited and approved",
            "confirm": "Marked done",
            "rerun": "Authorised a re-run of",
        }[verdict]
        messages.success(request, f"{done} {approval.tool} for run {approval.run_id}.")
        next_url = request.POST.get("next", "")
        if not url_has_allowed_host_and_scheme(next_url, allowed_hosts={request.get_host()}):
            next_url = "desk"
        return redirect(next_url)
    data = approval_data(approval)
    return render(
        request,
        "desk/approval.html",
        {
            "approval": data,
            "canonical_arguments": canonical_json(approval.arguments).decode(),
            "pretty_arguments": json.dumps(approval.arguments, indent=2, ensure_ascii=False),
            "may_decide": approval.status == "pending" and user_may_decide(request.user, approval.run),
        },
    )


def _edited_arguments(request: HttpRequest) -> object:
    try:
        return json.loads(request.POST.get("arguments", ""))
    except json.JSONDecodeError as exc:
        raise Invalid(f"the edited arguments are not valid JSON ({exc.msg}, line {exc.lineno})") from None


@login_required
def run_list(request: HttpRequest) -> HttpResponse:
    return render(request, "desk/runs.html", {"runs": runs_visible_to(request.user)[:200]})


@login_required
def run_page(request: HttpRequest, run_id) -> HttpResponse:
    try:
        run = run_get_for_user(run_id=run_id, user=request.user)
    except NotFound:
        raise Http404("no such run") from None
    return render(
        request,
        "desk/run.html",
        {
            "run": run,
            "messages_log": run.messages.order_by("position"),
            "approvals": run.approvals.select_related("decision", "decision__reviewer"),
            "side_effects": run.side_effects.all(),
            "attempts": run.attempts.all(),
            "ended": run.status in ENDED,
        },
    )


@login_required
@require_http_methods(["POST"])
def run_control(request: HttpRequest, run_id, action: str) -> HttpResponse:
    """The run page's Cancel and Retry buttons (session + CSRF); the services check who may."""
    service = {"cancel": run_cancel, "retry": run_retry}[action]
    try:
        service(run_id=run_id, user=request.user)
    except NotFound:
        raise Http404("no such run") from None
    except DeskError as exc:
        messages.error(request, f"Could not {action}: {exc.detail}")
    else:
        messages.success(request, {"cancel": "Run cancelled.", "retry": "Run queued again."}[action])
    return redirect("run", run_id=run_id)


@login_required
def audit_page(request: HttpRequest) -> HttpResponse:
    if not is_admin(request.user):
        raise PermissionDenied("the audit trail is for admins")
    intact, first_bad = audit_verify()
    events = AuditEvent.objects.select_related("actor").order_by("-id")[:500]
    return render(request, "desk/audit.html", {"events": events, "intact": intact, "first_bad": first_bad})


def api_docs(request: HttpRequest) -> HttpResponse:
    return render(request, "desk/api_docs.html")
