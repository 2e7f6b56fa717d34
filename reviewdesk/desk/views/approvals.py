"""One approval's page: what the call would do, why the agent asks, the decision forms; the
preview as the reviewer edits; and the decision posted from the page or from the desk."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_http_methods

from agents.canonical import canonical_json
from reviewdesk.accounts.devicekeys import endorsed_key_ids
from reviewdesk.approvals.access import approval_get_visible, may_decide
from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.approvals.lifecycle.provenance import edited_provenance
from reviewdesk.approvals.models import ApprovalKind, ApprovalRequest, ApprovalStatus, Verdict
from reviewdesk.approvals.reads.context import approval_context, approval_preview, approval_tool
from reviewdesk.approvals.reads.representation import approval_data
from reviewdesk.desk.cards import call_summary
from reviewdesk.desk.questions import posted_answer, question_form
from reviewdesk.desk.views.base import DECISION_CONTEXT, DESK_SOCKET_PATH, DONE, require_reviewer
from reviewdesk.desk.views.grants import grant_form_context, posted_grant
from reviewdesk.lib.errors import DeskError, Invalid, NotFound, explain
from reviewdesk.lib.limits import json_depth_exceeds
from reviewdesk.runs.models import EffectStatus, SideEffect
from reviewdesk.slack.delivery import delivery_rows


@login_required
@require_http_methods(["GET", "POST"])
def approval_page(request: HttpRequest, approval_id) -> HttpResponse:
    require_reviewer(request)
    try:
        approval = approval_get_visible(approval_id=approval_id, user=request.user)
    except NotFound:
        raise Http404("no such approval") from None
    if request.method == "POST":
        return _decide(request, approval)
    tool = approval_tool(approval)
    qualifies = approval.status == ApprovalStatus.PENDING and may_decide(request.user, approval)
    # A vote still waiting for its quorum; once settled, the page shows the decision itself.
    voted = approval.status == ApprovalStatus.PENDING and any(
        d.reviewer_id == request.user.pk for d in approval.approving_decisions()
    )
    payload = approval_data(approval)
    preview = approval_preview(approval, approval.arguments)
    return render(
        request,
        "desk/approval.html",
        {
            "approval": payload,
            "context": approval_context(approval),
            "preview": preview,
            # What approving would confirm first, as on the desk (cards.call_summary's "unusual").
            "summary": _summary(payload, preview),
            # An external call's edit is checked against its framework's schema.
            "schema": tool.parameters if tool else (approval.arguments_schema or {}),
            "canonical_arguments": canonical_json(approval.arguments).decode(),
            "may_decide": qualifies and not voted,
            "may_handover": qualifies and not voted,
            "voted": voted,
            "failed_calls": _failed_calls(approval),
            "question": question_form(approval.arguments) if approval.kind == ApprovalKind.QUESTION else None,
            **grant_form_context(request.user, approval, tool),
            "socket_path": DESK_SOCKET_PATH,
            # The browser signs with its own device key when it holds one of these.
            "device_key_ids": endorsed_key_ids(request.user),
            # Where each Slack message about it stands (posted, retrying, mailed instead).
            "slack_deliveries": delivery_rows(approval) if request.user.is_staff else None,
            **DECISION_CONTEXT,
        },
    )


def _summary(payload: dict, preview: dict) -> dict | None:
    """The desk's summary of a tool call (`call_summary`): its facts, its body's first lines and
    what is unusual about approving it. None for a question or a reconciliation."""
    return call_summary(payload, preview=preview) if payload["kind"] == ApprovalKind.TOOL_CALL else None


def _failed_calls(approval: ApprovalRequest) -> set[str]:
    """The ids of this run's approvals whose call ran and failed (`SideEffect.outcome`): the
    earlier decisions say so, though the run went on."""
    effects = SideEffect.objects.filter(run_id=approval.run_id, status=EffectStatus.CONFIRMED)
    failed = [
        e.tool_call_id for e in effects.only("status", "result", "tool_call_id") if e.outcome == "failed"
    ]
    if not failed:
        return set()
    approvals = ApprovalRequest.objects.filter(run_id=approval.run_id, tool_call_id__in=failed)
    return {str(pk) for pk in approvals.values_list("pk", flat=True)}


# The largest edited-arguments body the preview endpoint reads, and the deepest nesting.
PREVIEW_MAX_BYTES = 64 * 1024
PREVIEW_MAX_DEPTH = 32


@login_required
@require_http_methods(["POST"])
def approval_preview_json(request: HttpRequest, approval_id) -> JsonResponse:
    """What the call would do with the edited arguments: {"preview", "errors", "summary"} as
    JSON, "summary" the desk's (`call_summary`) for the call with these arguments: its facts,
    and what is unusual about approving it (the page confirms an edit only then). None for a
    question or a reconciliation.

    The approval page calls it as the reviewer edits (session + CSRF), and with the original
    arguments when a vote changes what approving means. Reviewers only, and only for an
    approval they may see; it reads and never acts.
    """
    require_reviewer(request)
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
    edited = {
        **approval_data(approval),
        "arguments": body["arguments"],
        **edited_sources(approval, body["arguments"], reviewer=request.user.get_username()),
    }
    result = {**result, "summary": _summary(edited, result)}
    return JsonResponse(result, status=422 if result["errors"] and result["preview"] is None else 200)


def edited_sources(approval: ApprovalRequest, arguments: Any, *, reviewer: str) -> dict[str, Any]:
    """The payload's provenance for edited arguments, as the decision will store it
    (`edited_provenance`): a value kept keeps its sources and its flags, a value the reviewer
    wrote is theirs and flags nothing. Without this an edit that replaced an untrusted
    recipient still warned of it, and one that kept it drew the old value's sources."""
    if approval.provenance is None:
        return {}
    before = approval.provenance.get("sources") or {}
    sources = edited_provenance(approval.provenance, approval.arguments, arguments, reviewer=reviewer)[
        "sources"
    ]
    kept = [
        flag
        for flag in approval.provenance.get("flags") or []
        if flag.get("pointer") in sources and sources[flag["pointer"]] == before.get(flag["pointer"])
    ]
    return {"provenance": sources, "provenance_flags": kept}


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
    # The run by its short id (the notice names the call; the run's page has the whole id).
    done = f"{DONE[verdict]} {approval.tool} for run {str(approval.run_id)[:8]}."
    if decision.request.status == ApprovalStatus.PENDING:  # a quorum vote: others must add theirs
        votes = len(decision.request.approving_decisions())
        done = f"{done[:-1]}: {votes} of {decision.request.required_approvals}, waiting for another reviewer."
    if _wants_json(request):  # desk_decide.js decides in place and keeps the reviewer in the queue
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
