"""Server-rendered pages. Each view: check who asks, fetch, call one service, render."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme, urlencode
from django.views.decorators.http import require_http_methods

from agents.canonical import canonical_json
from agents.registry import agent_names, get_agent
from reviewdesk.accounts.devicekeys import endorsed_key_ids
from reviewdesk.accounts.roles import is_admin, is_reviewer, is_submitter
from reviewdesk.approvals.access import approval_get_visible, may_decide
from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.approvals.models import ApprovalKind, ApprovalRequest, ApprovalStatus, Verdict
from reviewdesk.approvals.reads.context import approval_context, approval_preview, approval_tool
from reviewdesk.approvals.reads.queue import (
    QUEUE_FILTER_NAMES,
    QUEUE_PAGE_SIZE,
    approvals_queue_for,
    queue_view_from,
)
from reviewdesk.approvals.reads.representation import approval_data, approvals_data

# What the decision templates compare with and limit to, so that they spell no enum value or limit.
from reviewdesk.desk.grant_views import grant_form_context, posted_grant
from reviewdesk.desk.questions import posted_answer, question_form
from reviewdesk.desk.routing import websocket_urlpatterns
from reviewdesk.desk.templatetags.desk_urls import PLACEHOLDER
from reviewdesk.events.services import latest_seq
from reviewdesk.lib.errors import DeskError, Invalid, NotFound, explain
from reviewdesk.lib.limits import EXTERNAL_REF_MAX, TEXT_MAX, json_depth_exceeds

DECISION_CONTEXT = {
    "ApprovalKind": ApprovalKind,
    "ApprovalStatus": ApprovalStatus,
    "Verdict": Verdict,
    "TEXT_MAX": TEXT_MAX,
    "EXTERNAL_REF_MAX": EXTERNAL_REF_MAX,
}

# The desk socket's path, read from its route (events/routing.py) so that it is written once.
(_DESK_SOCKET_ROUTE,) = websocket_urlpatterns
DESK_SOCKET_PATH = "/" + str(_DESK_SOCKET_ROUTE.pattern)

DONE = {
    Verdict.APPROVE: "Approved",
    Verdict.REJECT: "Rejected",
    Verdict.EDIT: "Edited and approved",
    Verdict.CONFIRM: "Marked done",
    Verdict.RERUN: "Authorised a re-run of",
    Verdict.ANSWER: "Answered",
}


def _require_reviewer(request: HttpRequest) -> None:
    if not (is_reviewer(request.user) or is_admin(request.user)):
        raise PermissionDenied("the desk is for reviewers")


@login_required
def desk(request: HttpRequest) -> HttpResponse:
    """The queue: the user's pending approvals, mine first then by expiry, filtered by the
    URL's agent, tool, run and assignee, one page of QUEUE_PAGE_SIZE at a time. A submitter
    who is no reviewer goes to their runs: logging in lands everyone here."""
    if is_submitter(request.user) and not (is_reviewer(request.user) or is_admin(request.user)):
        return redirect("runs")
    _require_reviewer(request)
    filters, offset = queue_view_from(request.GET)
    filters = replace(filters, run=run_filter_text(filters.run))
    page = approvals_queue_for(request.user, filters, offset=offset)
    if page.deeper:
        last_call = page.offset + len(page.approvals)
        messages.info(
            request, f"The desk pages no further than call {last_call:,}: filter the queue to reach the rest."
        )
    elif page.offset < offset:
        messages.info(request, f"Call {offset + 1:,} is past the end of this queue: here is its last page.")
    kept = {name: getattr(filters, name) for name in FILTERS if getattr(filters, name)}
    tools = sorted({tool.name for name in agent_names() for tool in get_agent(name).tools})
    return render(
        request,
        "desk/desk.html",
        {
            "approvals": approvals_data(page.approvals),
            "page": page,
            "page_last": page.offset + len(page.approvals),
            "page_size": QUEUE_PAGE_SIZE,
            "filters": filters,
            "filtered": bool(kept),
            "prev_query": urlencode({**kept, "offset": page.prev_offset})
            if page.prev_offset is not None
            else None,
            "next_query": urlencode({**kept, "offset": page.next_offset})
            if page.next_offset is not None
            else None,
            "agents": agent_names(),
            "tools": tools,
            "seq": latest_seq(),
            "socket_path": DESK_SOCKET_PATH,
            **card_context(request),
            **DECISION_CONTEXT,
        },
    )


def card_context(request: HttpRequest) -> dict[str, str]:
    """What desk/_card.html reads besides its approval, worked out once a page rather than once
    a card (issue 11: a page at 10,000 pending holds twice the cards of one at 10): the viewer's
    name (their own runs' calls are not theirs to decide) and the links, as patterns that the
    url_for filter and desk.js's urlFor fill with an id."""
    return {
        "username": request.user.get_username(),
        "desk_url": reverse("desk"),
        "placeholder": PLACEHOLDER,
        "run_url": reverse("run", args=[PLACEHOLDER]),
        "approval_url": reverse("approval", args=[PLACEHOLDER]),
    }


FILTERS = QUEUE_FILTER_NAMES


def run_filter_text(run: str) -> str:
    """The `?run=` filter written as the queue reads it: a run id the UUID parser takes (without
    hyphens, in braces, as `urn:uuid:`, in capitals) as the canonical text of that UUID, which
    is how every approval names its run; anything else as it was (it matches no run). The page's
    rows, its links and desk.js's live filter (data-filter-run, compared as text) all use this
    one form: desk.js compared the id as typed, and a live call of the run never joined the page."""
    try:
        return str(uuid.UUID(run)) if run else run
    except ValueError:
        return run


@login_required
@require_http_methods(["GET", "POST"])
def approval_page(request: HttpRequest, approval_id) -> HttpResponse:
    _require_reviewer(request)
    try:
        approval = approval_get_visible(approval_id=approval_id, user=request.user)
    except NotFound:
        raise Http404("no such approval") from None
    if request.method == "POST":
        return _decide(request, approval)
    tool = approval_tool(approval)
    qualifies = approval.status == ApprovalStatus.PENDING and may_decide(request.user, approval, approval.run)
    # A vote still waiting for its quorum; once settled, the page shows the decision itself.
    voted = approval.status == ApprovalStatus.PENDING and any(
        d.reviewer_id == request.user.pk for d in approval.approving_decisions()
    )
    return render(
        request,
        "desk/approval.html",
        {
            "approval": approval_data(approval),
            "context": approval_context(approval),
            "preview": approval_preview(approval, approval.arguments),
            "schema": tool.parameters if tool else {},
            "canonical_arguments": canonical_json(approval.arguments).decode(),
            "may_decide": qualifies and not voted,
            "may_handover": qualifies and not voted,
            "voted": voted,
            "question": question_form(approval.arguments) if approval.kind == ApprovalKind.QUESTION else None,
            **grant_form_context(request.user, approval, tool),
            "socket_path": DESK_SOCKET_PATH,
            # The browser signs with its own device key when it holds one of these (issue 13).
            "device_key_ids": endorsed_key_ids(request.user),
            **DECISION_CONTEXT,
        },
    )


# The largest edited-arguments body the preview endpoint reads, and the deepest nesting.
PREVIEW_MAX_BYTES = 64 * 1024
PREVIEW_MAX_DEPTH = 32


@login_required
@require_http_methods(["POST"])
def approval_preview_json(request: HttpRequest, approval_id) -> JsonResponse:
    """What the call would do with the edited arguments: {"preview", "errors"} as JSON.

    The approval page calls it as the reviewer edits (session + CSRF). Reviewers only,
    and only for an approval they may see; it reads and never acts.
    """
    _require_reviewer(request)
    try:
        approval = approval_get_visible(approval_id=approval_id, user=request.user)
    except NotFound:
        return JsonResponse({"detail": "no such approval"}, status=404)
    if len(request.body) > PREVIEW_MAX_BYTES:
        return JsonResponse({"detail": f"the body is larger than {PREVIEW_MAX_BYTES} bytes"}, status=413)
    try:
        body = json.loads(request.body)
    except (ValueError, RecursionError):
        return JsonResponse({"detail": "the body is not JSON"}, status=400)
    if not isinstance(body, dict) or "arguments" not in body:
        return JsonResponse({"detail": 'send {"arguments": {...}}'}, status=400)
    if json_depth_exceeds(body["arguments"], PREVIEW_MAX_DEPTH):
        return JsonResponse({"detail": f"the arguments nest deeper than {PREVIEW_MAX_DEPTH}"}, status=400)
    result = approval_preview(approval, body["arguments"])
    return JsonResponse(result, status=422 if result["errors"] and result["preview"] is None else 200)


def _decide(request: HttpRequest, approval: ApprovalRequest) -> HttpResponse:
    """The decision forms: parse the POST, let the decide service judge it, say what happened."""
    verdict = request.POST.get("verdict", "")
    try:
        arguments = _posted_arguments(request)
        reason = request.POST.get("reason", "").strip()
        note = request.POST.get("note", "").strip()
        external_ref = request.POST.get("external_ref", "").strip()
        answer = posted_answer(request.POST, approval.arguments) if verdict == Verdict.ANSWER else None
        decision = approval_decide(
            approval_id=approval.id,
            reviewer=request.user,
            verdict=verdict,
            reason=reason,
            note=note,
            external_ref=external_ref,
            arguments=arguments,
            answer=answer,
            checkpoint_id=request.POST.get("checkpoint_id", ""),
            grant=posted_grant(request),
        )
    except DeskError as exc:
        if _wants_json(request):  # a batch on the desk reports each refusal with its item
            detail = f"Not decided: {explain(exc)}{_decided_by(approval, exc)}"
            return JsonResponse({"decided": False, "detail": detail, "code": exc.code}, status=exc.status)
        messages.error(request, f"Not decided: {explain(exc)}")
        return redirect("approval", approval_id=approval.id)
    done = f"{DONE[verdict]} {approval.tool} for run {approval.run_id}."
    if decision.request.status == ApprovalStatus.PENDING:  # a quorum vote: others must add theirs
        votes = len(decision.request.approving_decisions())
        done = f"{done[:-1]}: {votes} of {decision.request.required_approvals}, waiting for another reviewer."
    if _wants_json(request):  # desk.js decides in place and keeps the reviewer in the queue
        return JsonResponse({"decided": True, "detail": done})
    messages.success(request, done)
    return _back_to(request.POST.get("next", ""), request)


def _back_to(next_url: str, request: HttpRequest) -> HttpResponse:
    """Back to the page the form came from (the desk's path, with its filters): a path on this
    host only, printable (a line break cannot go in a Location header: a 500). Anything else is
    the desk: `redirect` would take a bare word such as "ab" for a view's name and fail (a 500
    after the decision was stored)."""
    if (
        next_url.startswith("/")
        and next_url.isprintable()
        and url_has_allowed_host_and_scheme(next_url, allowed_hosts={request.get_host()})
    ):
        return HttpResponseRedirect(next_url)
    return redirect("desk")


def _decided_by(approval: ApprovalRequest, exc: DeskError) -> str:
    """Who decided first, when that is why this decision was refused: the approvers of an
    approved call (a quorum's every vote), the reviewer who rejected a rejected one. Not every
    decider: a call approved by alice and then rejected by bob was not "rejected by alice, bob"."""
    if exc.code != "decided":
        return ""
    settled = ApprovalRequest.objects.prefetch_related("decisions__reviewer").get(pk=approval.pk)
    # The last vote of a quorum settles it with the votes before it; any other verdict (a
    # rejection, an answer, a confirm, even after re-run votes) settles it alone.
    votes = settled.approving_decisions()
    deciders = votes if settled.decision in votes else [settled.decision]
    names = sorted({d.reviewer.get_username() for d in deciders if d is not None})
    return f" by {', '.join(names)}" if names else ""


def _wants_json(request: HttpRequest) -> bool:
    return request.headers.get("Accept", "").startswith("application/json")


def _posted_arguments(request: HttpRequest) -> object:
    """The edit form's arguments as JSON, or None when the form sent none."""
    if "arguments" not in request.POST:
        return None
    try:
        return json.loads(request.POST["arguments"])
    except json.JSONDecodeError as exc:
        raise Invalid(f"the edited arguments are not valid JSON ({exc.msg}, line {exc.lineno})") from None
    except RecursionError:  # the decoder gave up: far past the documented depth limit
        raise Invalid("the edited arguments nest too deeply") from None


# The runs list and the audit page: one page of this many rows at a time.


def api_docs(request: HttpRequest) -> HttpResponse:
    return render(request, "desk/api_docs.html")
