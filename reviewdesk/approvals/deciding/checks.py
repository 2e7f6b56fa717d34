"""Checking a decision before it is recorded: `approval_check_decide` authorises the reviewer
and validates the verdict under the run's and the approval's row locks (expired, decided,
cancelled, a stale page, a quorum vote, an edit, a re-run, an answer). `record.py` records
what passes."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils import timezone

from agents.canonical import canonical_json
from agents.questions import answer_problem
from agents.registry import UnknownAgent, get_agent
from agents.state import AgentState, CallStatus
from agents.tools import Tool, schema_errors
from reviewdesk.accounts.roles import group_names_of, is_reviewer
from reviewdesk.agent_modules.loading import not_loaded_here
from reviewdesk.approvals.access import approval_visible_to, may_decide, named_by
from reviewdesk.approvals.deciding.input import DecisionInput, decision_input_check
from reviewdesk.approvals.lifecycle.routing import targets_for_call
from reviewdesk.approvals.models import ApprovalKind, ApprovalRequest, ApprovalStatus, Verdict
from reviewdesk.approvals.rows import approval_locked_with_attempt
from reviewdesk.lib.errors import Conflict, Forbidden, Gone, Invalid, NotFound
from reviewdesk.runs.checkpoints import latest_checkpoint, snapshot_of
from reviewdesk.runs.models import ENDED, Run, SideEffect
from reviewdesk.runs.rows import run_locked

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def approval_check_decide(
    *, approval_id: Any, reviewer: User, decision: DecisionInput
) -> tuple[ApprovalRequest, Run]:
    """Authorise and validate a decision; return the approval and its run, both locked.

    Lock precondition: call inside transaction.atomic(). Locks the run row, then
    the approval row (always in that order, as the worker does), so a decision
    and a worker's step on the same run serialise.
    """
    # The reviewer's groups, read once for the role, the visibility and the rule below.
    group_names = group_names_of(reviewer)
    if not is_reviewer(reviewer, group_names=group_names):
        raise Forbidden("only reviewers can decide approvals")
    # The run (with its submitter, whom the approval's event names), then the approval (with
    # its attempt, which the payload names): each row locked, the run's first. Visible to the
    # reviewer, or NotFound, as a missing one is: the rule is applied to the locked row.
    try:
        run = run_locked(approval_id, with_submitter=True, of_approval=True)
        approval = approval_locked_with_attempt(approval_id)
    except (ValidationError, Run.DoesNotExist, ApprovalRequest.DoesNotExist):
        raise NotFound("no such approval") from None
    approval.run = run  # the locked row, which the rules below read
    if not approval_visible_to(reviewer, approval, group_names=group_names):
        raise NotFound("no such approval")
    if reviewer.pk == run.submitted_by_id:
        raise Forbidden("you submitted this run; another reviewer must decide its approvals")
    if not may_decide(reviewer, approval, run, group_names=group_names):
        raise Forbidden("this approval is assigned to another reviewer or group")
    decision_input_check(decision, kind=approval.kind)
    verdict = decision.verdict
    if verdict not in approval.allowed_verdicts:
        # An external call lists what its framework can carry out: an edit where it has none
        # would be signed, and then fail in the framework's process.
        raise Invalid(
            f"this call is answered with {', '.join(approval.allowed_verdicts)} only", code="verdict"
        )
    if approval.status == ApprovalStatus.EXPIRED or (
        approval.status == ApprovalStatus.PENDING and approval.expires_at <= timezone.now()
    ):
        raise Gone("this approval has expired", code="expired")
    if approval.status not in (ApprovalStatus.PENDING, ApprovalStatus.CANCELLED):
        # Decided first: say so even when its run has ended since (it ran on that decision).
        raise Conflict(f"this approval was already {approval.status}", code="decided")
    # An external run's framework may end it before its call's outcome is known: the
    # reconciliation of that call stays a human's to decide after the run's end.
    open_after_end = run.is_external and approval.kind == ApprovalKind.RECONCILE
    if approval.status == ApprovalStatus.CANCELLED or (run.status in ENDED and not open_after_end):
        raise Conflict("this approval was cancelled with its run", code="cancelled")
    if str(decision.checkpoint_id) != str(approval.checkpoint_id) or not _call_is_awaiting(run, approval):
        raise Conflict(
            "stale page: the approval was raised at another checkpoint or is no longer part of "
            "the run's open batch; reload and decide again",
            code="stale",
        )
    if approval.required_approvals > 1:
        _check_quorum_vote(approval, reviewer, verdict)
    if verdict == Verdict.EDIT and run.is_external:
        # Routed by what its framework sent, not by the arguments: an edit cannot move it.
        _check_external_edit(approval, decision.arguments)
    elif verdict == Verdict.EDIT:
        _check_edit(run, approval, decision.arguments)
        _check_edit_stays_with(reviewer, run, approval, decision.arguments, group_names)
    if verdict == Verdict.RERUN:
        _check_stale_attempt_is_over(run, approval)
    if verdict == Verdict.ANSWER:
        _check_answer(approval, decision.answer)
    return approval, run


def _check_edit_stays_with(
    reviewer: User, run: Run, approval: ApprovalRequest, arguments: Any, group_names: set[str]
) -> None:
    """An edit may not move a call to where others must decide it: a refund of 150, anyone's,
    edited to 5,000, which the demo routes to finance. Routing was applied to the arguments the
    request was raised with; asked again for the edited ones, it must name the same deciders,
    or name this reviewer (as a standing grant is asked at each use)."""
    before = targets_for_call(run=run, tool_name=approval.tool, arguments=approval.arguments)
    after = targets_for_call(run=run, tool_name=approval.tool, arguments=arguments)
    if sorted(after) == sorted(before) or named_by(reviewer, after, group_names=group_names):
        return
    raise Forbidden(
        f"the edited call is for {', '.join(after) or 'any reviewer'} to decide, not you: "
        "reject it with a reason, or hand it over"
    )


def _check_answer(approval: ApprovalRequest, answer: Any) -> None:
    problem = answer_problem(approval.arguments, answer)
    if problem is not None:
        raise Invalid(problem, code="invalid_answer")
    try:
        canonical_json(answer)
    except ValueError as exc:
        raise Invalid(
            f"the answer cannot be canonicalised (RFC 8785): {exc}", code="invalid_answer"
        ) from None


def _check_quorum_vote(approval: ApprovalRequest, reviewer: User, verdict: str) -> None:
    """Under a quorum, each reviewer votes once, and only for the arguments as raised: an edit
    would leave the votes already cast approving other arguments, so it is refused (reject
    with a reason instead, and let the agent call again)."""
    if approval.decisions.filter(reviewer=reviewer).exists():
        raise Conflict(
            "you have already voted on this approval; another reviewer must add theirs", code="voted"
        )
    if verdict == Verdict.EDIT:
        raise Invalid(
            f"this call needs {approval.required_approvals} approvals: it cannot be edited; "
            "reject it with a reason instead",
            code="verdict",
        )


def _check_stale_attempt_is_over(run: Run, approval: ApprovalRequest) -> None:
    """A re-run is authorised only once the attempt that left the effect unknown can no longer act.

    That attempt may be frozen, not dead, and could still perform the effect when it wakes.
    Celery's prefork pool kills a task CELERY_TASK_TIME_LIMIT after it started, and the attempt
    was created inside its task, so once that long has passed since the attempt started, its
    process is gone. (Clocks of web and worker hosts are assumed in step; a row with no
    attempt counts from its last change, which is later than any attempt that wrote it.)
    """
    effect = (
        SideEffect.objects.filter(idempotency_key=f"{run.pk}:{approval.tool_call_id}")
        .select_related("attempt")
        .first()
    )
    if effect is None:
        return
    since = effect.attempt.started_at if effect.attempt is not None else effect.updated_at
    possible_at = since + timedelta(seconds=settings.CELERY_TASK_TIME_LIMIT)
    if timezone.now() < possible_at:
        raise Conflict(
            f"the attempt that started this effect may still be running until {possible_at.isoformat()} "
            f"(its task's hard time limit, {settings.CELERY_TASK_TIME_LIMIT}s); a re-run can be signed "
            "from then on. If the effect did happen, mark it done now.",
            code="rerun_too_early",
            errors={"possible_at": possible_at.isoformat()},
        )


def _call_is_awaiting(run: Run, approval: ApprovalRequest) -> bool:
    """The approval's call is still waiting in the run's latest checkpoint (its open batch).

    A sibling's resume writes new checkpoints but leaves this call awaiting, so
    it does not make the page stale; a finished or abandoned batch does.
    """
    if run.is_external:
        # No snapshot to read: its framework holds the state, and the request is the call.
        return approval.status == ApprovalStatus.PENDING
    latest = latest_checkpoint(run.pk)
    if latest is None:
        return False
    waiting = CallStatus.UNKNOWN if approval.kind == ApprovalKind.RECONCILE else CallStatus.AWAITING
    return any(
        call.id == approval.tool_call_id and call.status == waiting
        for call in AgentState.from_snapshot(snapshot_of(latest)).batch
    )


def tool_still_deployed(run: Run, approval: ApprovalRequest) -> Tool:
    """The agent's tool the approval's call names, or a stale-page Conflict when it is gone."""
    try:
        agent = get_agent(run.agent)
    except UnknownAgent:  # this process's DESK_AGENTS lacks the agent: it cannot check the call
        raise Conflict(not_loaded_here(run.agent), code="stale") from None
    tool = agent.tool(approval.tool)
    if tool is None:  # the agent was redeployed without it: nothing can run this call
        raise Conflict(f"the agent {run.agent!r} has no tool {approval.tool!r} any more", code="stale")
    return tool


def _check_edit(run: Run, approval: ApprovalRequest, arguments: Any) -> None:
    tool = tool_still_deployed(run, approval)
    errors = tool.validation_errors(arguments)
    if errors:
        raise Invalid("the edited arguments do not match the tool's schema", errors=errors)
    _check_edit_changes(approval, arguments)


def _check_external_edit(approval: ApprovalRequest, arguments: Any) -> None:
    """An external call's edit is checked against the JSON Schema its framework sent: the desk
    has no deployed tool for it. No schema: no edit (its verdicts never list one then)."""
    if approval.arguments_schema is None:
        raise Invalid("this call cannot be edited: its framework sent no schema for it", code="verdict")
    errors = schema_errors(approval.arguments_schema, arguments)
    if errors:
        raise Invalid("the edited arguments do not match the call's schema", errors=errors)
    _check_edit_changes(approval, arguments)


def _check_edit_changes(approval: ApprovalRequest, arguments: Any) -> None:
    try:
        edited = canonical_json(arguments)
    except ValueError as exc:
        raise Invalid(f"the edited arguments cannot be canonicalised (RFC 8785): {exc}") from None
    # An "edit" that changes nothing is an approval signed under another name: the audit would
    # say the reviewer changed the call. Refused, so an approval is recorded as one.
    if edited == canonical_json(approval.arguments):
        raise Invalid("No changes: use Approve", code="unchanged")
