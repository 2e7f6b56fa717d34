"""Handing a pending request to a colleague or a group, with a note.

`approval_check_handover` authorises and validates under lock; `approval_do_handover`
re-targets the request, audits it and pushes it live to both the old and the new
audience (the item leaves the desks it no longer belongs on and appears on the new ones);
`approval_handover` does both.

Under a quorum the votes already cast stay valid: their reviewers remain among the
targets (they cannot vote twice), so a hand-over never voids a signed approval.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from agents.routing import group_of, is_target
from reviewdesk.accounts.roles import is_reviewer
from reviewdesk.approvals.access import (
    approval_audience,
    approval_get_visible,
    deciders_of,
    may_decide,
    named_by,
)
from reviewdesk.approvals.models import ApprovalRequest, ApprovalStatus
from reviewdesk.approvals.reads.representation import approval_data
from reviewdesk.audit.services import audit_record
from reviewdesk.events.services import event_emit
from reviewdesk.lib.errors import Conflict, Forbidden, Gone, Invalid
from reviewdesk.lib.limits import NUL_REFUSED, TEXT_MAX
from reviewdesk.runs.models import ENDED, Run

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def approval_check_handover(*, approval_id: Any, by: User, to: Any, note: Any) -> tuple[ApprovalRequest, Run]:
    """Authorise and validate a hand-over; return the approval and its run, both locked.

    Lock precondition: call inside transaction.atomic(). Locks the run row, then the
    approval row, in the order every decision and worker step takes them.
    """
    if not is_reviewer(by):
        raise Forbidden("only reviewers can hand approvals over")
    approval = approval_get_visible(approval_id=approval_id, user=by)
    run = Run.objects.select_for_update().get(pk=approval.run_id)
    approval = ApprovalRequest.objects.select_for_update().get(pk=approval.pk)
    if not may_decide(by, approval, run):
        raise Forbidden("only someone who may decide this approval can hand it over")
    if any(vote.reviewer_id == by.pk for vote in approval.approving_decisions()):
        # A voter may not cast the second vote, so neither may they choose who does.
        raise Conflict(
            "you have already voted on this approval; a reviewer who has not may hand it over", code="voted"
        )
    if not isinstance(note, str) or len(note) > TEXT_MAX:
        raise Invalid(f"note is text of at most {TEXT_MAX} characters", errors={"note": ["invalid"]})
    if "\x00" in note:
        raise Invalid(f"note: {NUL_REFUSED}", errors={"note": [NUL_REFUSED]})
    if approval.status == ApprovalStatus.EXPIRED or (
        approval.status == ApprovalStatus.PENDING and approval.expires_at <= timezone.now()
    ):
        raise Gone("this approval has expired", code="expired")
    if approval.status == ApprovalStatus.CANCELLED or run.status in ENDED:
        raise Conflict("this approval was cancelled with its run", code="cancelled")
    if approval.status != ApprovalStatus.PENDING:
        raise Conflict(f"this approval was already {approval.status}", code="decided")
    _check_target(approval, run, to)
    return approval, run


def _check_target(approval: ApprovalRequest, run: Run, to: Any) -> None:
    """The target must be able to decide: 422 otherwise (the submitter never can)."""
    if not is_target(to):
        raise Invalid('"to" is a username or "group:NAME"', errors={"to": ["invalid"]})
    voters = {d.reviewer_id for d in approval.approving_decisions()}
    group = group_of(to)
    candidates = deciders_of(_retargeted(approval, [to]), run).exclude(pk__in=voters)
    if group is None:
        user = get_user_model().objects.filter(username=to).first()
        if user is None or not candidates.filter(pk=user.pk).exists():
            raise Invalid(
                f"{to} may not decide this approval (not an active reviewer, the run's submitter, "
                "outside the quorum's groups, or has already voted)",
                errors={"to": ["cannot decide"]},
            )
    elif not candidates.exists():
        raise Invalid(f"nobody in group {group!r} may decide this approval", errors={"to": ["cannot decide"]})


def _retargeted(approval: ApprovalRequest, targets: list[str]) -> ApprovalRequest:
    """An unsaved copy of the request with other targets, to ask who would qualify."""
    return ApprovalRequest(assignees=targets, quorum_groups=approval.quorum_groups)


def approval_do_handover(
    *, approval: ApprovalRequest, run: Run, by: User, to: str, note: str
) -> ApprovalRequest:
    """Re-target the request, audit it, and push it to the old and the new audience.

    Lock precondition: `approval` and `run` were locked by approval_check_handover."""
    before = list(approval.assignees)
    old_audience = approval_audience(approval)
    voters = [d.reviewer.get_username() for d in approval.approving_decisions()]
    approval.assignees = [to] + [v for v in voters if not named_by_name(v, to)]
    approval.handed_over_by = by
    approval.handed_over_at = timezone.now()
    approval.handover_note = note
    approval.notified_at = None  # the notify pass emails the new assignee
    approval.save(
        update_fields=[
            "assignees",
            "handed_over_by",
            "handed_over_at",
            "handover_note",
            "notified_at",
            "updated_at",
        ]
    )
    audit_record(
        actor=by,
        action="approval.handed_over",
        subject_type="approval",
        subject_id=approval.id,
        data={"run": str(run.pk), "from": before, "to": to, "note": note},
    )
    new_audience = approval_audience(approval)
    # Empty means every reviewer: then everyone hears it, and each desk keeps or drops the card.
    audience = [] if not old_audience or not new_audience else sorted(set(old_audience) | set(new_audience))
    event_emit(type="approval.updated", data=approval_data(approval), run_id=run.pk, audience=audience)
    return approval


def named_by_name(username: str, target: str) -> bool:
    """Whether `target` already names `username` (directly, or through a group they are in)."""
    user = get_user_model().objects.filter(username=username).first()
    return user is not None and named_by(user, [target])


def approval_handover(*, approval_id: Any, by: User, to: Any, note: Any = "") -> ApprovalRequest:
    with transaction.atomic():
        approval, run = approval_check_handover(approval_id=approval_id, by=by, to=to, note=note)
        return approval_do_handover(approval=approval, run=run, by=by, to=to, note=note)
