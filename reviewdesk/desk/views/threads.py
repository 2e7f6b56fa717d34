"""The run page's thread: each user message (the task, then every follow-up) and what
followed it; and the form by which the submitter posts a follow-up (`runs.threads`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_http_methods

from agents.tools import call_failed
from reviewdesk.accounts.roles import is_submitter
from reviewdesk.lib.errors import DeskError, NotFound
from reviewdesk.runs.models import Message, Run, RunStatus
from reviewdesk.runs.threads import run_follow_up

FOLLOW_UP_MAX = 100_000  # as the API's `input`


@dataclass
class ToolCalled:
    name: str
    failed: bool = False  # its result says so (`call_failed`), even if the run went on


@dataclass
class Turn:
    number: int  # 0: the submitted task
    said: str
    by: str
    at: datetime | None
    replies: list[str] = field(default_factory=list)  # the model's words, in order
    tools: list[ToolCalled] = field(default_factory=list)  # the calls it made, in order


def run_thread(run: Run) -> list[Turn]:
    """The run's turns, oldest first, from its live message log and follow-up rows: two queries."""
    follow_ups = {f.position: f for f in run.follow_ups.select_related("posted_by")}
    turns = [Turn(0, run.input, run.submitted_by.get_username(), run.created_at)]
    log = Message.objects.filter(run=run, superseded_at__isnull=True, position__gte=2).order_by("position")
    called: dict[str, ToolCalled] = {}  # by call id: its result, a later message, may say it failed
    for message in log:
        if message.position in follow_ups:
            f = follow_ups[message.position]
            turns.append(Turn(f.number, f.input, f.posted_by.get_username(), f.created_at))
        elif message.role == "assistant":
            _add_reply(turns[-1], message.body, called)
        elif message.role == "tool" and message.body.get("tool_call_id") in called:
            called[message.body["tool_call_id"]].failed = call_failed(_result(message.body.get("content")))
    return turns


def _add_reply(turn: Turn, body: dict[str, Any], called: dict[str, ToolCalled]) -> None:
    if body.get("content"):
        turn.replies.append(str(body["content"]))
    for call in body.get("tool_calls") or []:
        entry = ToolCalled(call.get("function", {}).get("name", "?"))
        turn.tools.append(entry)
        called[str(call.get("id", ""))] = entry


def _result(content: Any) -> Any:
    """A tool message's content as the tool returned it: JSON text, read back."""
    try:
        return json.loads(content) if isinstance(content, str) else content
    except ValueError:
        return content


def may_follow_up(run: Run, user) -> bool:
    """Whether the page offers the form; the service decides again when it is posted."""
    return run.status == RunStatus.SUCCEEDED and run.submitted_by_id == user.pk and is_submitter(user)


@login_required
@require_http_methods(["POST"])
def run_follow_up_post(request: HttpRequest, run_id) -> HttpResponse:
    """The run page's follow-up form (session + CSRF); the service checks who and when."""
    text = request.POST.get("input", "").strip()
    if not text or len(text) > FOLLOW_UP_MAX:
        messages.error(request, f"Write a message of 1 to {FOLLOW_UP_MAX} characters.")
        return redirect("run", run_id=run_id)
    if "\x00" in text:  # PostgreSQL cannot store it: the message was a 500 on the insert
        messages.error(request, "The message may not hold a NUL character.")
        return redirect("run", run_id=run_id)
    try:
        run_follow_up(run_id=run_id, user=request.user, input=text)
    except NotFound:
        raise Http404("no such run") from None
    except DeskError as exc:
        messages.error(request, f"Could not post: {exc.detail}")
    else:
        messages.success(request, "Message posted; the run is queued again.")
    return redirect("run", run_id=run_id)
