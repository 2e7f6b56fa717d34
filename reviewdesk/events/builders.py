"""The one place desk events and their payloads are built."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from django.db.models import Prefetch, QuerySet

from agents.decisions import is_device_signed
from agents.registry import UnknownAgent, get_agent
from reviewdesk.accounts.targets import UsernamesNamed, usernames_named
from reviewdesk.approvals.models import DECISION_LIST, ApprovalRequest, ApprovalStatus, Decision
from reviewdesk.runs.models import Run


def iso(value) -> str | None:
    """RFC 3339 in UTC with a Z, as every timestamp the desk shows or signs; always with its
    microseconds, so the strings sort as the times do (Python drops a zero fraction: "...:11Z"
    sorted after "...:11.287206Z")."""
    return value.isoformat(timespec="microseconds").replace("+00:00", "Z") if value else None


# How a payload expands the groups its assignees name: `usernames_named`, or for a page of
# approvals an `UsernamesNamed` that read every group on the page at once.
Expand = Callable[[Iterable[str]], list[str]]


def reviewer_of(approval: ApprovalRequest, *, named: Expand = usernames_named) -> dict[str, Any]:
    """Who may decide: `targets` as named (usernames, "group:NAME"; empty: any reviewer) and
    `users`, the usernames they name with groups expanded (the desk's "mine")."""
    return {
        "users": named(approval.assignees),
        "targets": list(approval.assignees),
        "group": "reviewers",
    }


def quorum_of(approval: ApprovalRequest) -> dict[str, Any]:
    """How many approvals the request needs and who has given theirs: the desk's "1 of 2"."""
    return {
        "required": approval.required_approvals,
        "approved_by": [d.reviewer.get_username() for d in approval.approving_decisions()],
        "groups": list(approval.quorum_groups),
    }


def handover_of(approval: ApprovalRequest) -> dict[str, Any] | None:
    if approval.handed_over_by_id is None:
        return None
    return {
        "by": approval.handed_over_by.get_username() if approval.handed_over_by else None,
        "at": iso(approval.handed_over_at),
        "note": approval.handover_note,
    }


def approval_data(approval: ApprovalRequest, *, named: Expand = usernames_named) -> dict[str, Any]:
    decision = approval.decision if approval.status != ApprovalStatus.PENDING else None
    return {
        "id": str(approval.id),
        "kind": approval.kind,
        "run": str(approval.run_id),
        "tool": approval.tool,
        "tool_call_id": approval.tool_call_id,
        "arguments": approval.arguments,
        "arguments_sha256": approval.arguments_sha256,
        "reason": approval.reason,
        "reviewer": reviewer_of(approval, named=named),
        "expires_at": iso(approval.expires_at),
        # The response-time clock (approvals/clock.py): null when the tool sets no target.
        "respond_by": iso(approval.respond_by),
        "reminded_at": iso(approval.reminded_at),
        "escalation_level": approval.escalation_level,
        "checkpoint_id": str(approval.checkpoint_id),
        "status": approval.status,
        "created_at": iso(approval.created_at),
        "decision": decision_data(decision) if decision else None,
        "quorum": quorum_of(approval),
        "handover": handover_of(approval),
        # What the desk's card shows besides the call: who asked, for what, and its risk.
        "agent": approval.run.agent,
        "submitted_by": approval.run.submitted_by.get_username(),
        "task": approval.run.input[:TASK_SHOWN],
        "effect": _effect(approval),
    }


def approval_for(data: dict[str, Any], *, username: str, admin: bool) -> dict[str, Any]:
    """An approval's payload (`approval_data`, or an approval event's data) as one user may read
    it: the one rule for a hand-over's note, on the desk socket and on the run's feeds alike.

    The note is written for who may see the call now (the users its targets name, and admins)
    and by who handed it over; to anyone else who may read the call (an event reaches those a
    change takes it from, a run is read whole by whoever may open it) the hand-over is told with
    its note left blank."""
    handover = data.get("handover")
    if admin or not handover or not handover.get("note") or handover.get("by") == username:
        return data
    reviewer = data.get("reviewer") or {}
    if not reviewer.get("targets") or username in reviewer.get("users", ()):
        return data
    return {**data, "handover": {**handover, "note": ""}}


def message_for(message: dict[str, Any], *, username: str, admin: bool) -> dict[str, Any]:
    """A desk event's message as one user's socket or stream may receive it: an approval
    event's data through `approval_for`.

    An approval event also reaches those a change takes the call from, so that their desks drop
    its card: a hand-over of a call open to every reviewer reaches every reviewer."""
    data = message.get("data")
    if not data or not message["type"].startswith("approval."):
        return message
    shown = approval_for(data, username=username, admin=admin)
    return message if shown is data else {**message, "data": shown}


def approvals_data(approvals: Iterable[ApprovalRequest]) -> list[dict[str, Any]]:
    """`approval_data` for each of a page of approvals, the groups their assignees name read
    once for the page: a page of group-assigned requests costs no query per row."""
    approvals = list(approvals)
    named = UsernamesNamed(a.assignees for a in approvals)
    return [approval_data(a, named=named) for a in approvals]


def approval_rows(
    approvals: QuerySet[ApprovalRequest], *, with_run: bool = True
) -> QuerySet[ApprovalRequest]:
    """`approvals` (read without their relations) with what `approval_data` reads of each, in
    two reads whatever the page (with `approvals_data`, a third for the groups it names): of the
    run and the submitter, only the columns it shows, and the run's status (the terminal's
    context); not every run's model, metadata and output, nor a submitter's password hash. The
    decisions, with their reviewers' usernames, into a plain list (a related manager and a
    queryset built for each row cost more than its row). `with_run=False`: no run, for a
    prefetch from the runs, which sets each row's own."""
    own = [field.name for field in ApprovalRequest._meta.concrete_fields]
    voted = [field.name for field in Decision._meta.concrete_fields]
    decisions = Decision.objects.select_related("reviewer").only(*voted, "reviewer__username")
    joined, shown = ("handed_over_by",), ("handed_over_by__username",)
    if with_run:
        joined += ("run__submitted_by",)
        shown += ("run__agent", "run__input", "run__status", "run__submitted_by__username")
    return (
        approvals.select_related(*joined)
        .only(*own, *shown)
        .prefetch_related(Prefetch("decisions", queryset=decisions, to_attr=DECISION_LIST))
    )


TASK_SHOWN = 280  # characters of the run's input on a card; the approval page shows it whole


def _effect(approval: ApprovalRequest) -> str:
    """The tool's effect kind ("external" is irreversible), or "" when it is not declared."""
    try:
        tool = get_agent(approval.run.agent).tool(approval.tool)
    except UnknownAgent:
        return ""
    return str(tool.effect) if tool else ""


def decision_data(decision) -> dict[str, Any]:
    return {
        "id": str(decision.id),
        "verdict": decision.verdict,
        "reason": decision.reason,
        "note": decision.note,
        "external_ref": decision.external_ref or None,
        "reviewer": decision.reviewer.username,
        "arguments_sha256": decision.arguments_sha256,
        "arguments": decision.arguments,
        "decided_at": iso(decision.decided_at),
        "payload": decision.payload,
        "signature": decision.signature,
        "key_id": decision.key_id,
        "signer": "device" if is_device_signed(decision.payload) else "server",
        "consumed_at": iso(decision.consumed_at),
        "answer": decision.answer,
    }


def run_data(run: Run) -> dict[str, Any]:
    return {
        "id": str(run.id),
        "agent": run.agent,
        "status": run.status,
        "revision": run.revision,
        "error": run.error,
        "updated_at": iso(run.updated_at),
    }


def run_follow_up_data(run: Run, follow_up) -> dict[str, Any]:
    """`run.updated` when a follow-up message reopens a succeeded run (webhooks: `run.follow_up`)."""
    return {**run_data(run), "follow_up": {"number": follow_up.number, "position": follow_up.position}}
