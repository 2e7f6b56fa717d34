"""Email notifications: the assignees hear of an approval when it is created, reminded or
escalated, each with a one-time link to its page (lifecycle/links.py).

Beat's `approvals.tick` sends them, never a run's worker: a slow or failing mail server
delays a notification, never a run. A failure is logged and audited (`notification.failed`);
the item stays on the desk. `notified_at` is claimed by compare-and-set before sending, so
two ticks send an item's notification once (at most once: a crash mid-send loses it).
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.mail import EmailMessage
from django.db import transaction

from reviewdesk.accounts.roles import is_reviewer
from reviewdesk.approvals.access import deciders_of
from reviewdesk.approvals.lifecycle.clock import chain_entry_users, escalation_chain
from reviewdesk.approvals.lifecycle.links import link_create
from reviewdesk.approvals.models import ApprovalKind, ApprovalRequest, ApprovalStatus
from reviewdesk.audit.services import audit_record

if TYPE_CHECKING:
    from django.contrib.auth.models import User

logger = logging.getLogger(__name__)

CREATED, REMINDER, ESCALATED = "created", "reminder", "escalated"
SUBJECTS = {
    CREATED: "{what} waits for you",
    REMINDER: "Reminder: {what} still waits for you",
    ESCALATED: "Escalated to you: {what}",
}


def notify_recipients(approval: ApprovalRequest) -> list[Any]:
    """Who hears of it: after an escalation (and no hand-over since) the chain entry's
    reviewers; else everyone who may decide it (its named users and groups' members, or
    every reviewer when it is open to all), less those who already voted. Never the
    submitter; only users with an email address."""
    run = approval.run
    if approval.escalation_level > 0 and approval.handed_over_at is None:
        chain = escalation_chain(run.agent, approval.tool)
        entry = chain[approval.escalation_level - 1] if approval.escalation_level <= len(chain) else ""
        users = chain_entry_users(entry, run) if entry else []
    else:
        voters = [d.reviewer_id for d in approval.approving_decisions()]
        deciders = deciders_of(approval, run).exclude(pk__in=voters).order_by("username")
        users = [u for u in deciders if is_reviewer(u)]
    return [user for user in users if user.email]


def approvals_notify(*, now: datetime) -> int:
    """Email every pending item not yet notified for its current assignment; how many were."""
    if not settings.DESK_NOTIFY_EMAIL:
        return 0
    sent = 0
    waiting = ApprovalRequest.objects.filter(status=ApprovalStatus.PENDING, notified_at__isnull=True)
    for approval_id, level in waiting.values_list("id", "escalation_level"):
        claimed = ApprovalRequest.objects.filter(
            pk=approval_id, notified_at__isnull=True, escalation_level=level
        ).update(notified_at=now)
        if claimed == 1:
            sent += notify_send(approval_id=approval_id, occasion=ESCALATED if level else CREATED)
    return sent


def notify_send(*, approval_id: Any, occasion: str) -> int:
    """Send the item's notification to each recipient, each with their own link; how many
    went out. Never raises for a mail failure: it is logged and audited."""
    if not settings.DESK_NOTIFY_EMAIL:
        return 0
    approval = ApprovalRequest.objects.select_related("run").get(pk=approval_id)
    sent = 0
    for user in notify_recipients(approval):
        try:
            with transaction.atomic():
                url = link_create(approval=approval, user=user)
            _message(approval, user, url, occasion).send()
        except Exception as exc:
            logger.exception("notification of approval %s to %s failed", approval.pk, user.get_username())
            audit_record(
                actor=None,
                action="notification.failed",
                subject_type="approval",
                subject_id=approval.pk,
                data={
                    "to": user.get_username(),
                    "occasion": occasion,
                    "error": f"{type(exc).__name__}: {exc}",
                },
            )
            continue
        audit_record(
            actor=None,
            action="notification.sent",
            subject_type="approval",
            subject_id=approval.pk,
            data={"to": user.get_username(), "occasion": occasion},
        )
        sent += 1
    return sent


def _message(approval: ApprovalRequest, user: User, url: str, occasion: str) -> EmailMessage:
    if approval.kind == ApprovalKind.QUESTION:
        what = f"A question from {approval.run.agent}"
        detail = f"The agent asks: {approval.arguments.get('question', '')}"
    else:
        what = f"{approval.tool} ({approval.run.agent})"
        detail = f"The agent wants to call {approval.tool}. Its arguments are on the page."
    body = (
        f"Hello {user.get_username()},\n\n{detail}\n\n"
        f"Open it on the desk (a link for you only, usable once; deciding still takes your click):\n{url}\n\n"
        f"It expires at {approval.expires_at.isoformat()}.\n"
    )
    host = settings.DESK_PUBLIC_URL.split("//")[-1].split("/")[0].split(":")[0] or "reviewdesk.local"
    return EmailMessage(
        subject=f"[Review Desk] {SUBJECTS[occasion].format(what=what)}",
        body=body,
        to=[user.email],
        # Not `<run id>.…`: the demo world's emails are named that way, notifications are not.
        headers={"Message-ID": f"<notify.{approval.pk}.{uuid.uuid4().hex}@{host}>"},
    )
