"""A second opinion: a model's advisory reading of a raised call (agents.second_opinion).

When the call's agent names a second-opinion model for its tool, `reading_requested` marks the
request's reading pending as it is raised (the row is inserted with it) and sends
`approvals.read` once the raise commits. That task (`reading_take`) runs on its own, never
inside a run's fenced transaction: it reads the run's log, asks the model with no row locked,
validates the answer and stores it by compare-and-set on a request still pending whose reading
is still pending, so a late or duplicate reading never overwrites a newer state. A failed model
call, a timeout or an invalid answer is stored as "unavailable", never as a risk.

    {"status": "pending" | "ready" | "unavailable", "model": str, "risk": "low" | "medium" |
     "high" | None, "summary": str, "concerns": [{"about", "text"}], "error": str
     (unavailable only), "at": RFC 3339}

Nothing that decides reads it: routing, quorum, grants, the gate and the decision's checks are
the same with or without a reading (tests/reviewdesk/approvals/test_reading_never_decides.py).
The decision copies it only to record what its reviewer was shown.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agents.providers import AssistantTurn, ModelProvider, ProviderError, ProviderName, provider_for
from agents.registry import UnknownAgent, get_agent
from agents.second_opinion import READING_TOOL, ReadingInvalid, model_label, reading_from, reading_prompt
from reviewdesk.approvals.access import approval_audience
from reviewdesk.approvals.models import ApprovalKind, ApprovalRequest, ApprovalStatus
from reviewdesk.approvals.reads.representation import approval_data
from reviewdesk.audit.services import audit_record
from reviewdesk.celery import app as celery_app
from reviewdesk.events.services import event_emit
from reviewdesk.lib.times import rfc3339_sortable
from reviewdesk.runs.models import Message, Run

logger = logging.getLogger(__name__)

READ_TASK = "approvals.read"
PENDING, READY, UNAVAILABLE = "pending", "ready", "unavailable"
ERROR_MAX = 300


def reading_requested(approval: ApprovalRequest) -> None:
    """Mark a request about to be inserted as awaiting its second opinion, and send the task
    that takes it once the transaction commits; nothing when none is configured for its tool,
    or for a question, a reconciliation or an external run's call."""
    spec = second_opinion_of(approval)
    if spec is None:
        return
    approval.reading = _reading(PENDING, model_label(spec))
    approval_id = str(approval.id)
    # robust: a broker outage must not fail the raise; the reading then stays pending.
    transaction.on_commit(lambda: celery_app.send_task(READ_TASK, args=[approval_id]), robust=True)


def second_opinion_of(approval: ApprovalRequest) -> dict[str, Any] | None:
    """The model spec that reads this request, or None."""
    run = approval.run
    if approval.kind != ApprovalKind.TOOL_CALL or run.is_external:
        return None
    try:
        return get_agent(run.agent).second_opinion_for(approval.tool)
    except UnknownAgent:
        return None


def reading_take(*, approval_id: Any) -> str:
    """The body of `approvals.read`: ask the model, store its reading. Returns what it did
    ("stored", "skipped": the request or its reading is no longer pending, "late": another
    state was stored while the model answered)."""
    approval = ApprovalRequest.objects.select_related("run").filter(pk=approval_id).first()
    if approval is None or not _awaiting(approval):
        return "skipped"
    reading = _reading_of(approval)
    return "stored" if reading_store(approval_id=approval.pk, reading=reading) else "late"


def _awaiting(approval: ApprovalRequest) -> bool:
    return approval.status == ApprovalStatus.PENDING and (approval.reading or {}).get("status") == PENDING


def _reading_of(approval: ApprovalRequest) -> dict[str, Any]:
    """Ask the model (no transaction open, no row locked); any failure is "unavailable"."""
    spec = second_opinion_of(approval)
    if spec is None:
        model = (approval.reading or {}).get("model", "")
        return _reading(UNAVAILABLE, model, error="no second opinion is configured here any more")
    model = model_label(spec)
    if spec.get("provider") == ProviderName.SCRIPTED and not settings.DESK_ALLOW_SCRIPTED_MODEL:
        return _reading(UNAVAILABLE, model, error="the scripted provider is disabled here")
    log = messages_through(approval.run, approval.tool_call_id)
    try:
        turn = _provider(spec).complete(_prompt(approval, log), [READING_TOOL])
    except ProviderError as exc:
        logger.warning("second opinion for approval %s: the model failed: %s", approval.pk, exc)
        return _reading(UNAVAILABLE, model, error=provider_error_class(exc))
    except Exception:  # a bug must show as unavailable, not leave the reading pending
        incident = uuid.uuid4().hex[:12]
        logger.exception("second opinion for approval %s failed (incident %s)", approval.pk, incident)
        return _reading(UNAVAILABLE, model, error=f"internal error (incident {incident})")
    return _validated(turn, approval, model, steps=len(log))


def _validated(turn: AssistantTurn, approval: ApprovalRequest, model: str, *, steps: int) -> dict[str, Any]:
    try:
        found = reading_from(turn, arguments=approval.arguments, steps=steps)
    except ReadingInvalid as exc:
        logger.warning(
            "second opinion for approval %s was invalid: %s (%s)", approval.pk, exc.reason, exc.detail
        )
        return _reading(UNAVAILABLE, model, error=f"the model's reading was invalid: {exc.reason}")
    return _reading(READY, model, **found)


def provider_error_class(exc: ProviderError) -> str:
    """What a reading's error says of a failed model call: its class only. The stored error
    reaches the API, the webhook, the socket and the audit, and the model server's answer
    (its body, whatever a proxy put in it) is no one's business there: the log has it."""
    if exc.status is not None:
        return f"the model server answered {exc.status}"
    if not exc.reached:
        return "the model server could not be reached"
    return "the model call failed"


def _provider(spec: dict[str, Any]) -> ModelProvider:
    return provider_for(
        spec,
        openai_options={
            "base_url": settings.OPENAI_BASE_URL,
            "api_key": settings.OPENAI_API_KEY,
            "timeout": settings.OPENAI_TIMEOUT_SECONDS,
            "max_retries": settings.OPENAI_MAX_RETRIES,
        },
    )


def _prompt(approval: ApprovalRequest, log: list[dict[str, Any]]) -> list[dict[str, Any]]:
    run = approval.run
    tool = get_agent(run.agent).tool(approval.tool)
    return reading_prompt(
        tool=approval.tool,
        description=tool.description if tool is not None else "",
        effect=str(tool.effect) if tool is not None else "",
        arguments=approval.arguments,
        task=run.input,
        recent=log,
        provenance=approval.provenance,
    )


def messages_through(run: Run, tool_call_id: str) -> list[dict[str, Any]]:
    """The run's live log up to and including the assistant message that made the call: its
    own words are the model's reason for it (provenance stops before it: `messages_before`)."""
    log = list(
        Message.objects.filter(run=run, superseded_at__isnull=True)
        .order_by("position")
        .values_list("body", flat=True)
    )
    for index in range(len(log) - 1, -1, -1):
        calls = log[index].get("tool_calls") or []
        if any(isinstance(call, dict) and str(call.get("id")) == tool_call_id for call in calls):
            return log[: index + 1]
    return log


def _reading(status: str, model: str, **fields: Any) -> dict[str, Any]:
    """A reading in its stored shape, by the model named `model`."""
    reading: dict[str, Any] = {
        "status": status,
        "model": model,
        "risk": fields.get("risk"),  # None unless the model gave a valid reading: never "low"
        "summary": fields.get("summary", ""),
        "concerns": fields.get("concerns", []),
        "at": rfc3339_sortable(timezone.now()),
    }
    if status == UNAVAILABLE:
        reading["error"] = str(fields.get("error", ""))[:ERROR_MAX]
    return reading


def reading_store(*, approval_id: Any, reading: dict[str, Any]) -> bool:
    """Store `reading` on a request still pending whose reading is still pending; audit it and
    tell the desk. False when either has moved on meanwhile (a decision, a duplicate task's
    reading): the state there is newer, and stays."""
    with transaction.atomic():
        stored = ApprovalRequest.objects.filter(
            pk=approval_id, status=ApprovalStatus.PENDING, reading__status=PENDING
        ).update(reading=reading, updated_at=timezone.now())
        if stored != 1:
            return False
        approval = ApprovalRequest.objects.select_related("run").get(pk=approval_id)
        audit_record(
            actor=None, action="approval.read", subject_type="approval", subject_id=approval.id, data=reading
        )
        event_emit(
            type="approval.updated",
            data=approval_data(approval),
            run_id=approval.run_id,
            audience=approval_audience(approval),
        )
    return True
