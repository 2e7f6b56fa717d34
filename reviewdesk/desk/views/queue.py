"""The desk: the queue of pending approvals a reviewer may decide, one page at a time."""

from __future__ import annotations

import uuid
from dataclasses import replace

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import urlencode

from agents.registry import agent_names, get_agent
from reviewdesk.accounts.devicekeys import endorsed_key_ids
from reviewdesk.accounts.roles import is_admin, is_reviewer, is_submitter
from reviewdesk.approvals.access import approval_get_visible
from reviewdesk.approvals.models import ApprovalStatus
from reviewdesk.approvals.reads.context import asking_text
from reviewdesk.approvals.reads.queue import (
    QUEUE_FILTER_NAMES,
    QUEUE_PAGE_SIZE,
    approvals_queue_for,
    queue_view_from,
)
from reviewdesk.approvals.reads.representation import approval_data, approvals_data
from reviewdesk.desk.cards import desk_view, with_desk_view
from reviewdesk.desk.templatetags.desk_urls import PLACEHOLDER
from reviewdesk.desk.views.base import DECISION_CONTEXT, DESK_SOCKET_PATH, require_reviewer
from reviewdesk.events.services import latest_seq
from reviewdesk.lib.errors import NotFound


@login_required
def desk(request: HttpRequest) -> HttpResponse:
    """The queue: the user's pending approvals, mine first then by expiry, filtered by the
    URL's agent, tool, run and assignee, one page of QUEUE_PAGE_SIZE at a time. A submitter
    who is no reviewer goes to their runs: logging in lands everyone here."""
    if is_submitter(request.user) and not (is_reviewer(request.user) or is_admin(request.user)):
        return redirect("runs")
    require_reviewer(request)
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
    kept = {name: getattr(filters, name) for name in QUEUE_FILTER_NAMES if getattr(filters, name)}
    # The sort is kept in every link, but a sorted queue is not a filtered one.
    filtered = any(value for name, value in kept.items() if name != "sort")
    tools = sorted({tool.name for name in agent_names() for tool in get_agent(name).all_tools()})
    # The editor's form is built from the tool's JSON Schema (edit.js), by agent and tool.
    schemas = {
        name: {tool.name: tool.parameters for tool in get_agent(name).all_tools()} for name in agent_names()
    }
    return render(
        request,
        "desk/desk.html",
        {
            "approvals": with_desk_view(
                approvals_data(page.approvals), username=request.user.get_username(), sort=filters.sort
            ),
            "page": page,
            "page_last": page.offset + len(page.approvals),
            "page_size": QUEUE_PAGE_SIZE,
            "filters": filters,
            "filtered": filtered,
            "clear_query": urlencode({"sort": filters.sort}) if filters.sort else "",
            "prev_query": urlencode({**kept, "offset": page.prev_offset})
            if page.prev_offset is not None
            else None,
            "next_query": urlencode({**kept, "offset": page.next_offset})
            if page.next_offset is not None
            else None,
            "questions_query": urlencode({**kept, "kind": "question"}),
            "all_kinds_query": urlencode({k: v for k, v in kept.items() if k != "kind"}),
            "tool_schemas": schemas,
            "card_url": reverse("desk-card", args=[PLACEHOLDER]),
            # A device-key tool is signed in the pane (pane_sign.js), as on the item's page.
            "device_key_ids": endorsed_key_ids(request.user),
            "payload_url": reverse("api-decision-payload", args=[PLACEHOLDER]),
            "decision_url": reverse("api-decision", args=[PLACEHOLDER]),
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
    a card (a page at 10,000 pending holds twice the cards of one at 10): the viewer's
    name (their own runs' calls are not theirs to decide) and the links, as patterns that the
    url_for filter and desk_card.js's urlFor fill with an id."""
    return {
        "username": request.user.get_username(),
        "desk_url": reverse("desk"),
        "placeholder": PLACEHOLDER,
        "run_url": reverse("run", args=[PLACEHOLDER]),
        "approval_url": reverse("approval", args=[PLACEHOLDER]),
    }


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
def desk_card(request: HttpRequest, approval_id) -> JsonResponse:
    """The desk's view (`cards.desk_view`) of one pending approval the reviewer may see, and the
    model's words that made the call, as JSON: how desk.js fills in a card a live event brought,
    which carries no preview, and the pane's "why the agent asks" for the selected card. 404 as the
    approval's page for one the reviewer may not see; 410 for one no longer pending."""
    require_reviewer(request)
    try:
        approval = approval_get_visible(approval_id=approval_id, user=request.user)
    except NotFound:
        raise Http404("no such approval") from None
    if approval.status != ApprovalStatus.PENDING:
        return JsonResponse({"detail": f"this approval is {approval.status}"}, status=410)
    payload = approval_data(approval)
    return JsonResponse(
        {
            "id": payload["id"],
            "desk": desk_view(payload, username=request.user.get_username()),
            # Model text, untrusted: the pane says so beside it.
            "asking": asking_text(approval),
        }
    )
