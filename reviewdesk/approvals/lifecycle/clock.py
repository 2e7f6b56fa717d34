"""Time and escalation: response-time targets, reminders at half, escalation past the whole.

A tool (or its agent) may declare `response_target_seconds` and an `escalation` chain;
DESK_RESPONSE_TARGETS and DESK_ESCALATION_CHAINS override them by "agent" or "agent.tool".
An approval raised for such a tool gets `respond_by`. Beat's `approvals.tick`:

- past half the target, reminds the assignees once (`reminded_at`; audit, live push, email);
- past `respond_by`, escalates to the chain's next entry (a username or "group:NAME"): the
  entry's reviewers join the assignees, the clock restarts, `escalation_level` goes up
  (audit, live push, email). When the chain is spent the clock stops.

Expiry is not this module's: an item still expires at `expires_at` (lifecycle.expiry.approvals_expire).
Every change here is a compare-and-set on the request row, taken under the run's lock like a
decision, so two ticks racing each other, or a decision, leave one outcome.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction

from agents.registry import UnknownAgent, get_agent
from reviewdesk.accounts.roles import is_reviewer
from reviewdesk.approvals.access import approval_audience
from reviewdesk.approvals.models import ApprovalRequest, ApprovalStatus
from reviewdesk.approvals.reads.representation import approval_data
from reviewdesk.audit.services import audit_record
from reviewdesk.events.services import event_emit
from reviewdesk.lib.times import rfc3339_sortable
from reviewdesk.runs.models import Run

GROUP_PREFIX = "group:"


def _declared(agent_name: str, tool_name: str, field: str) -> Any:
    overrides = settings.DESK_RESPONSE_TARGETS if field == "target" else settings.DESK_ESCALATION_CHAINS
    for key in (f"{agent_name}.{tool_name}", agent_name):
        if key in overrides:
            return overrides[key]
    try:
        agent = get_agent(agent_name)
    except UnknownAgent:
        return None
    tool = agent.tool(tool_name)
    attribute = "response_target_seconds" if field == "target" else "escalation"
    return (getattr(tool, attribute, None) if tool else None) or getattr(agent, attribute)


def target_seconds(agent_name: str, tool_name: str) -> int | None:
    """The response-time target for this tool, or None when it has none."""
    value = _declared(agent_name, tool_name, "target")
    return int(value) if value else None


def escalation_chain(agent_name: str, tool_name: str) -> list[str]:
    return [str(entry) for entry in _declared(agent_name, tool_name, "chain") or ()]


def respond_by_for(run: Run, tool_name: str, *, since: datetime) -> datetime | None:
    target = target_seconds(run.agent, tool_name)
    return since + timedelta(seconds=target) if target else None


def chain_entry_users(entry: str, run: Run) -> list[Any]:
    """The reviewers a chain entry names (a user, or a group's members), never the submitter."""
    users = get_user_model().objects.filter(is_active=True).exclude(pk=run.submitted_by_id)
    if entry.startswith(GROUP_PREFIX):
        users = users.filter(groups__name=entry.removeprefix(GROUP_PREFIX))
    else:
        users = users.filter(username=entry)
    return [user for user in users.order_by("username") if is_reviewer(user)]


def approvals_remind(*, now: datetime) -> list[Any]:
    """Remind once per clock the assignees of items past half their target; the reminded ids."""
    reminded = []
    candidates = ApprovalRequest.objects.filter(
        status=ApprovalStatus.PENDING,
        respond_by__isnull=False,
        reminded_at__isnull=True,
        expires_at__gt=now,  # past its expiry it cannot be decided: nobody to remind
    ).select_related("run")
    for approval in candidates:
        target = target_seconds(approval.run.agent, approval.tool)
        if target is None or approval.respond_by is None:
            continue
        if now < approval.respond_by - timedelta(seconds=target / 2):
            continue
        with transaction.atomic():
            run = Run.objects.select_for_update().get(pk=approval.run_id)
            if approval_remind(approval_id=approval.pk, level=approval.escalation_level, run=run, now=now):
                reminded.append(approval.pk)
    return reminded


def approval_remind(*, approval_id: Any, level: int, run: Run, now: datetime) -> bool:
    """Mark the reminder sent, once for this escalation level. Caller holds the run lock."""
    claimed = ApprovalRequest.objects.filter(
        pk=approval_id, status=ApprovalStatus.PENDING, reminded_at__isnull=True, escalation_level=level
    ).update(reminded_at=now, updated_at=now)
    if claimed != 1:
        return False
    approval = ApprovalRequest.objects.get(pk=approval_id)
    audit_record(
        actor=None,
        action="approval.reminded",
        subject_type="approval",
        subject_id=approval.id,
        data={"respond_by": rfc3339_sortable(approval.respond_by), "assignees": list(approval.assignees)},
    )
    event_emit(
        type="approval.updated",
        data=approval_data(approval),
        run_id=run.pk,
        audience=approval_audience(approval),
    )
    return True


def approvals_escalate(*, now: datetime) -> int:
    """Escalate every pending item past its target, each in its own transaction."""
    overdue = ApprovalRequest.objects.filter(status=ApprovalStatus.PENDING, respond_by__lte=now)
    # Past its expiry (the sweeper expires it on its own beat) it cannot be decided: nobody is
    # called in to decide it, and its clock is left for the expiry to end.
    overdue = overdue.filter(expires_at__gt=now)
    escalated = 0
    for approval_id, run_id, level in overdue.values_list("id", "run_id", "escalation_level"):
        with transaction.atomic():
            run = Run.objects.select_for_update().get(pk=run_id)
            escalated += approval_escalate(approval_id=approval_id, level=level, run=run, now=now)
    return escalated


def approval_escalate(*, approval_id: Any, level: int, run: Run, now: datetime) -> int:
    """Move the item one step up its chain if it is still pending at `level`; 1 if it moved.

    Caller holds the run lock. The compare-and-set on (status, escalation_level) is what lets
    two escalations, or an escalation and a decision, race: one wins, the other changes nothing.
    """
    approval = ApprovalRequest.objects.get(pk=approval_id)
    chain = escalation_chain(run.agent, approval.tool)
    if level >= len(chain):
        # The chain is spent: the clock stops; the item waits, and still expires at expires_at.
        stopped = ApprovalRequest.objects.filter(
            pk=approval_id, status=ApprovalStatus.PENDING, escalation_level=level, respond_by__lte=now
        ).update(respond_by=None, updated_at=now)
        if stopped == 1:
            audit_record(
                actor=None,
                action="approval.overdue",
                subject_type="approval",
                subject_id=approval_id,
                data={"level": level, "chain": chain},
            )
            # Open desks still count down to the target the clock no longer has: tell them.
            approval.refresh_from_db()
            event_emit(
                type="approval.updated",
                data=approval_data(approval),
                run_id=run.pk,
                audience=approval_audience(approval),
            )
        return 0
    entry = chain[level]
    joining = [user.get_username() for user in chain_entry_users(entry, run)]
    # An item open to every reviewer stays open; a named one gains the entry's reviewers.
    assignees = list(dict.fromkeys([*approval.assignees, *joining])) if approval.assignees else []
    target = target_seconds(run.agent, approval.tool)
    moved = ApprovalRequest.objects.filter(
        pk=approval_id, status=ApprovalStatus.PENDING, escalation_level=level, respond_by__lte=now
    ).update(
        escalation_level=level + 1,
        assignees=assignees,
        respond_by=now + timedelta(seconds=target) if target else None,
        reminded_at=None,
        notified_at=None,  # the notify pass emails the entry's reviewers
        updated_at=now,
    )
    if moved != 1:
        return 0
    approval.refresh_from_db()
    audit_record(
        actor=None,
        action="approval.escalated",
        subject_type="approval",
        subject_id=approval.id,
        data={"level": level + 1, "to": entry, "reviewers": joining, "assignees": assignees},
    )
    event_emit(
        type="approval.updated",
        data=approval_data(approval),
        run_id=run.pk,
        audience=approval_audience(approval),
    )
    return 1
