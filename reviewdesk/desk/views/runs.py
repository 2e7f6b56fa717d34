"""The runs list and the run page: filters, paging, the timeline, cancel and retry."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import prefetch_related_objects
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from agents.registry import agent_names
from agents.tools import call_failed
from reviewdesk.accounts.roles import is_admin
from reviewdesk.approvals.models import ApprovalStatus
from reviewdesk.approvals.reads.context import external_conversation
from reviewdesk.audit.models import AuditEvent
from reviewdesk.desk.paging import filter_text, paged
from reviewdesk.desk.views.base import DESK_SOCKET_PATH, DONE
from reviewdesk.desk.views.threads import may_follow_up, run_thread
from reviewdesk.lib.errors import CheckpointNotFound, DeskError, Forbidden, NotFound
from reviewdesk.runs.access import run_get_visible, runs_visible_to
from reviewdesk.runs.models import ENDED, AttemptStatus, EffectStatus, Run, RunStatus
from reviewdesk.runs.retention import kept_after_end
from reviewdesk.runs.services import run_cancel, run_retry

if TYPE_CHECKING:
    from django.contrib.auth.models import User


@login_required
def run_list(request: HttpRequest) -> HttpResponse:
    """The runs the user may see, newest first, filtered by the URL's status and agent, a page
    at a time: the same number of queries whatever the number of runs."""
    kept = {name: filter_text(request, name) for name in ("status", "agent")}
    kept = {name: value for name, value in kept.items() if value}
    runs = runs_visible_to(request.user)
    if "status" in kept:
        runs = runs.filter(status=kept["status"])
    if "agent" in kept:
        runs = runs.filter(agent=kept["agent"])
    page = paged(request, runs.order_by("-created_at", "-id"), kept)
    # Each run named by its task and the tools it called: two more queries for the whole page.
    prefetch_related_objects(page["rows"], "approvals", "side_effects")
    for run in page["rows"]:
        run.calls = run_calls(run)
        run.failed_calls = sum(call.failed for call in run.calls)
    return render(
        request,
        "desk/runs.html",
        {
            "page": page,
            "filters": kept,
            "statuses": RunStatus.choices,
            "agents": agent_names(),
        },
    )


@dataclass
class RunCall:
    """A tool the run called, as the runs list names it: asked a reviewer (an approval), still
    waiting for one, and failed (a confirmed call whose result says it failed, even if the run
    went on: `SideEffect.outcome`)."""

    tool: str
    waiting: bool = False
    failed: bool = False


def run_calls(run: Run) -> list[RunCall]:
    """The tools of the run's approvals and ledger rows, in the order first asked for or done;
    from prefetched rows (`approvals`, `side_effects`), so a page of runs reads them at once."""
    calls: dict[str, RunCall] = {}
    for approval in sorted(run.approvals.all(), key=lambda a: a.created_at):
        call = calls.setdefault(approval.tool, RunCall(approval.tool))
        call.waiting = call.waiting or approval.status == ApprovalStatus.PENDING
    for effect in sorted(run.side_effects.all(), key=lambda e: e.created_at):
        call = calls.setdefault(effect.tool, RunCall(effect.tool))
        call.failed = call.failed or effect.outcome == "failed"
    return list(calls.values())


@dataclass(frozen=True)
class TimelineEntry:
    at: datetime
    kind: str  # run, attempt, model, approval, decision, effect: the CSS class and the legend
    text: str
    detail: str = ""
    approval_id: str = ""
    # The worker's own steps (attempts, model turns, a call recorded before it runs): folded on
    # the page under what a person cares about (asked, decided, did, failed).
    worker: bool = False
    failed: bool = False  # a run, an attempt or a tool call that failed: said in red


def run_timeline(run: Run) -> list[TimelineEntry]:
    """Everything that happened to the run, oldest first, from the rows it left: its own audit
    rows (submitted, cancelled, retried, ended), attempts, model turns, approvals raised and
    decided, grant uses, and ledger rows. Six queries whatever the run's length."""
    entries: list[TimelineEntry] = []
    for e in AuditEvent.objects.filter(subject_type="run", subject_id=str(run.id)).order_by("id"):
        reported = external_entry(run, e)
        if reported is not None:
            entries.append(reported)
            continue
        verb = e.action.removeprefix("run.").replace("_", " ")
        by = "" if e.actor_name == "system" else f"by {e.actor_name}"
        # A row that says what happened in words (the agent's definition changed) shows them.
        summary = e.data.get("summary") if isinstance(e.data, dict) else None
        detail = summary if isinstance(summary, str) else by
        failed = e.action in ("run.failed", "run.call_failed")
        entries.append(TimelineEntry(e.at, "run", f"Run {verb}", detail, failed=failed))
    for a in run.attempts.order_by("number"):
        entries.append(
            TimelineEntry(a.started_at, "attempt", f"Attempt #{a.number} started", a.worker, worker=True)
        )
        if a.ended_at:
            # An attempt that failed or was lost is news to a person; one released is routine.
            broke = a.status in (AttemptStatus.FAILED, AttemptStatus.LOST)
            entries.append(
                TimelineEntry(
                    a.ended_at,
                    "attempt",
                    f"Attempt #{a.number} {a.status}",
                    a.error,
                    worker=not broke,
                    failed=broke,
                )
            )
    for m in run.messages.filter(role="assistant").order_by("position"):
        calls = [c.get("function", {}).get("name", "?") for c in m.body.get("tool_calls") or []]
        text = "Model turn" + (f": asks for {', '.join(calls)}" if calls else ": answers")
        content = str(m.body.get("content") or "")
        detail = content[:160] + ("…" if len(content) > 160 else "")
        if m.superseded_at:
            detail = f"(set aside by a retry) {detail}"
        entries.append(TimelineEntry(m.created_at, "model", text, detail, worker=True))
    for ap in run.approvals.prefetch_related("decisions__reviewer").order_by("created_at"):
        entries.append(
            TimelineEntry(ap.created_at, "approval", f"Approval requested: {ap.tool}", ap.reason, str(ap.id))
        )
        # Every signed decision: under a quorum, each reviewer's vote is its own entry.
        for decision in sorted(ap.decisions.all(), key=lambda d: d.decided_at):
            entries.append(
                TimelineEntry(
                    decision.decided_at,
                    "decision",
                    f"{DONE[decision.verdict]} {ap.tool}",
                    f"by {decision.reviewer}" + (f": {decision.reason}" if decision.reason else ""),
                    str(ap.id),
                )
            )
            if run.is_external and decision.consumed_at:
                # The framework verified it and took it, once, right before its tool ran.
                entries.append(
                    TimelineEntry(
                        decision.consumed_at,
                        "decision",
                        f"{run.framework} took the decision on {ap.tool}",
                        f"{ap.tool_call_id}, {decision.verdict}",
                        str(ap.id),
                    )
                )
        if ap.status in (ApprovalStatus.EXPIRED, ApprovalStatus.CANCELLED):
            entries.append(
                TimelineEntry(ap.updated_at, "decision", f"Approval {ap.status}: {ap.tool}", "", str(ap.id))
            )
    for use in run.grant_uses.select_related("grant__granted_by").order_by("used_at"):
        entries.append(
            TimelineEntry(
                use.used_at,
                "grant",
                f"Allowed by a standing grant: {use.grant.tool}",
                f"grant {use.grant_id} by {use.grant.granted_by}, use {use.number} of {use.grant.max_uses}"
                f" ({use.tool_call_id})",
            )
        )
    for fx in run.side_effects.order_by("created_at"):
        entries.append(
            TimelineEntry(fx.created_at, "effect", f"Effect {fx.tool} recorded as pending", worker=True)
        )
        if fx.status != EffectStatus.PENDING:
            retries = (
                f"after {fx.retries} transient failure{'s' if fx.retries != 1 else ''}" if fx.retries else ""
            )
            # "confirmed" says the effect happened; a call that did not do what was asked says so too.
            failed = fx.outcome == "failed"
            outcome = " (failed)" if failed else ""
            entries.append(
                TimelineEntry(
                    fx.updated_at, "effect", f"Effect {fx.tool} {fx.status}{outcome}", retries, failed=failed
                )
            )
    return sorted(entries, key=lambda entry: entry.at)


def external_entry(run: Run, event: AuditEvent) -> TimelineEntry | None:
    """What an external run's framework reported, and an effect it never reported, as timeline
    entries (runs/external/report.py, unknown.py); None for any other row."""
    data = event.data if isinstance(event.data, dict) else {}
    if event.action == "tool.finished":
        status, summary = data.get("status", ""), data.get("summary", "")
        return TimelineEntry(
            event.at,
            "effect",
            f"{run.framework} reports {data.get('tool_call_id', '')} {status}",
            summary,
            failed=status != "confirmed",
        )
    if event.action == "run.finished":
        status = data.get("status", "")
        return TimelineEntry(
            event.at,
            "run",
            f"Run {status} in {run.framework}",
            data.get("output", "")[:160],
            failed=status == RunStatus.FAILED,
        )
    if event.action == "effect.unknown":
        return TimelineEntry(
            event.at,
            "effect",
            f"Effect {data.get('tool', '')} unknown: never reported",
            f"{data.get('tool_call_id', '')}: a reviewer reconciles it",
            failed=True,
        )
    return None


@login_required
def run_page(request: HttpRequest, run_id) -> HttpResponse:
    try:
        run = run_get_visible(run_id=run_id, user=request.user)
    except NotFound:
        raise Http404("no such run") from None
    timeline = run_timeline(run)
    # Read the run again after its timeline: its status and the "Run succeeded" row commit
    # together, so a page whose timeline shows the end never shows the run still running.
    run.refresh_from_db()
    side_effects = list(run.side_effects.all())
    return render(
        request,
        "desk/run.html",
        {
            "run": run,
            "timeline": timeline,
            "thread": run_thread(run),  # each user message and what followed
            "may_follow_up": may_follow_up(run, request.user),
            "messages_log": run.messages.order_by("position"),
            # An external run's context, as its framework sent it (untrusted).
            "external_chat": external_conversation(run.context) if run.is_external else [],
            "approvals": run.approvals.prefetch_related("decisions__reviewer"),
            "side_effects": side_effects,
            "failed_calls": sum(e.outcome == "failed" for e in side_effects),
            "worker_steps": sum(entry.worker for entry in timeline),
            "failed_results": failed_results(run),
            "attempts": run.attempts.all(),
            "checkpoints": run.checkpoints.defer("snapshot").order_by("number"),
            "may_retry": _may_retry(run, request.user),
            "ended": run.status in ENDED,
            "checkpoints_kept": kept_after_end(),
            "RunStatus": RunStatus,
            "socket_path": DESK_SOCKET_PATH,
        },
    )


def failed_results(run: Run) -> set[str]:
    """The tool call ids whose result, as the model read it, says the call failed
    (`agents.tools.call_failed`: a tool error, a command that exited non-zero)."""
    failed = set()
    for body in run.messages.filter(role="tool").values_list("body", flat=True):
        if not isinstance(body, dict) or not body.get("tool_call_id"):
            continue
        try:
            result = json.loads(body.get("content") or "null")
        except (TypeError, ValueError):
            continue
        if call_failed(result):
            failed.add(body["tool_call_id"])
    return failed


@login_required
@require_http_methods(["POST"])
def run_control(request: HttpRequest, run_id, action: str) -> HttpResponse:
    """The run page's Cancel and Retry buttons (session + CSRF); the services check who may."""
    service = {"cancel": run_cancel, "retry": run_retry}[action]
    options = {}
    if action == "retry" and request.POST.get("checkpoint_id"):  # "Retry from here" on a checkpoint
        try:
            options["checkpoint_id"] = str(uuid.UUID(request.POST["checkpoint_id"]))
        except ValueError:
            messages.error(request, "Could not retry: checkpoint_id is not a checkpoint's id.")
            return redirect("run", run_id=run_id)
    try:
        service(run_id=run_id, user=request.user, **options)
    except CheckpointNotFound as exc:  # a stale page's "Retry from here": the run is there
        messages.error(request, f"Could not {action}: {exc.detail}")
    except NotFound:
        raise Http404("no such run") from None
    except Forbidden as exc:  # may see the run, may not steer it
        raise PermissionDenied(exc.detail) from None
    except DeskError as exc:
        messages.error(request, f"Could not {action}: {exc.detail}")
    else:
        messages.success(request, {"cancel": "Run cancelled.", "retry": "Run queued again."}[action])
    return redirect("run", run_id=run_id)


def _may_retry(run: Run, user: User) -> bool:
    """Whether the page offers a retry: the service (run_retry) decides again when posted."""
    retryable = run.status in (RunStatus.FAILED, RunStatus.CANCELLED) and not run.is_external
    return retryable and (is_admin(user) or run.submitted_by_id == user.pk)
