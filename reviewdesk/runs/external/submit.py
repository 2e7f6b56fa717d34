"""Submitting an external run's gated calls: `POST /api/v1/external/approvals`.

The run is upserted by (submitting account, external id), the framework's checkpoint becomes a
desk `Checkpoint` row (no snapshot of the desk's own: schema_version 0), and each call becomes an
approval request, idempotently: the same call (same account, external id, tool call id) with
the same argument hash meets the request it made before, whatever its status; with another hash
it is a conflict. The desk recomputes every hash over the RFC 8785 bytes it would sign, so the
framework and the desk provably hash the same bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import IntegrityError, transaction
from django.db.models import Max

from agents.canonical import canonical_json, sha256_hex
from agents.routing import GROUP_PREFIX
from agents.tools import schema_problem
from reviewdesk.accounts.roles import REVIEWERS, is_submitter
from reviewdesk.approvals.lifecycle.raising import ExternalCall, approval_raise_external
from reviewdesk.approvals.models import ApprovalKind, ApprovalRequest, Verdict
from reviewdesk.audit.services import audit_record
from reviewdesk.lib.db import atomic_appends_last
from reviewdesk.lib.errors import FIELD_ERRORS_DETAIL, Conflict, Forbidden, Invalid
from reviewdesk.lib.limits import json_depth_exceeds, json_holds_nul
from reviewdesk.runs.external.granted import external_call_granted
from reviewdesk.runs.models import ENDED, Checkpoint, Run, RunKind, RunStatus
from reviewdesk.runs.rows import run_insert
from reviewdesk.runs.transitions import run_emit_updated, run_external_waiting_update

if TYPE_CHECKING:
    from django.contrib.auth.models import User

# The caps (REACH §2.1): a call's canonical arguments, the context's canonical JSON, the calls
# in one submit.
ARGUMENTS_MAX_BYTES = 64 * 1024
CONTEXT_MAX_BYTES = 256 * 1024
CALLS_MAX = 50
# What a framework may say it can do with a decision; approve and reject it must.
EXTERNAL_VERDICTS = (Verdict.APPROVE, Verdict.REJECT, Verdict.EDIT)
REQUIRED_VERDICTS = (Verdict.APPROVE, Verdict.REJECT)
RESUME_POLICIES = ("per_call", "all_or_nothing")
CONTEXT_ROLES = ("user", "assistant", "tool", "system")


@dataclass(frozen=True)
class ExternalSubmission:
    """A submit as the API parsed it (types and lengths); `external_submit` checks the rest."""

    external_id: str
    framework: str
    agent: str
    checkpoint: str
    calls: list[dict[str, Any]]
    title: str = ""
    input: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    resume_policy: str = "per_call"
    context: dict[str, Any] | None = None
    reviewers: list[str] = field(default_factory=list)
    approval_ttl_seconds: int | None = None


@dataclass(frozen=True)
class Submitted:
    """What a submit made or met: the run, the desk checkpoint, each call's request (in the
    order sent), and whether anything was created (201) or all was met again (200)."""

    run: Run
    checkpoint: Checkpoint
    approvals: list[ApprovalRequest]
    created: bool


def external_submit(*, submitter: User, submission: ExternalSubmission) -> Submitted:
    if not is_submitter(submitter):
        raise Forbidden("only members of the submitters group can submit runs")
    calls = _checked_calls(submitter, submission)
    _check_context(submission.context)
    with atomic_appends_last():
        run, run_created = _run_for(submitter, submission)
        met = _calls_met(run, calls)
        new = [call for call in calls if call.tool_call_id not in met]
        if new and run.status in ENDED:
            raise Conflict(f"the run has already ended ({run.status})", code="ended")
        # The desk checkpoint the new calls are raised at; calls met again keep theirs.
        checkpoint = (
            _checkpoint_for(run, submission.checkpoint) if new else met[calls[0].tool_call_id].checkpoint
        )
        approvals = {}
        for call in new:
            approvals[call.tool_call_id] = approval_raise_external(
                run=run,
                checkpoint_id=checkpoint.pk,
                call=call,
                resume_policy=submission.resume_policy,
                submitter=submitter,
            )
            # A standing grant that covers the call answers it at once, signed (grants.external).
            external_call_granted(approval=approvals[call.tool_call_id], run=run)
        if run_created:
            audit_record(
                actor=submitter,
                action="run.submitted",
                subject_type="run",
                subject_id=run.id,
                data={"agent": run.agent, "kind": run.kind, "framework": run.framework},
            )
        if new:
            run_external_waiting_update(run)
        if run_created:
            run_emit_updated(run)
        ordered = [approvals.get(call.tool_call_id) or met[call.tool_call_id] for call in calls]
    return Submitted(
        run=run,
        checkpoint=checkpoint,
        approvals=ordered,
        created=bool(new),
    )


# --- checks before anything is written ---------------------------------------------------------


def _checked_calls(submitter: User, submission: ExternalSubmission) -> list[ExternalCall]:
    """Each call as the desk will store it: its hash recomputed (422 `arguments_sha256` on a
    mismatch), its verdicts and schema checked, its reviewers known. Field errors are keyed
    `calls[i].field`, reported together."""
    if not submission.calls:
        raise _invalid("calls", "at least one call")
    if len(submission.calls) > CALLS_MAX:
        raise _invalid("calls", f"at most {CALLS_MAX} calls in one submit")
    if submission.resume_policy not in RESUME_POLICIES:
        raise _invalid("resume_policy", f"one of {', '.join(RESUME_POLICIES)}")
    run_targets = _targets(submitter, submission.reviewers, "reviewers")
    errors: dict[str, list[str]] = {}
    mismatched: list[str] = []
    calls: list[ExternalCall] = []
    seen: set[str] = set()
    for index, sent in enumerate(submission.calls):
        where = f"calls[{index}]"
        call_id = sent["tool_call_id"]
        if call_id in seen:
            errors[f"{where}.tool_call_id"] = [f"{call_id!r} is sent twice in this submit"]
            continue
        seen.add(call_id)
        arguments = sent["arguments"]
        problem = _arguments_problem(arguments)
        if problem:
            errors[f"{where}.arguments"] = [problem]
            continue
        computed = sha256_hex(arguments)
        if sent["arguments_sha256"] != computed:
            mismatched.append(f"{where}: sent {sent['arguments_sha256']}, the desk computes {computed}")
            continue
        schema = sent.get("schema")
        if schema is not None and (problem := schema_problem(schema)):
            errors[f"{where}.schema"] = [problem]
            continue
        verdicts, problem = _verdicts(sent.get("verdicts"), has_schema=schema is not None)
        if problem:
            errors[f"{where}.verdicts"] = [problem]
            continue
        targets = _targets(submitter, sent.get("reviewers") or [], f"{where}.reviewers")
        calls.append(
            ExternalCall(
                tool_call_id=call_id,
                tool=sent["tool"],
                arguments=arguments,
                arguments_sha256=computed,
                verdicts=verdicts,
                schema=schema,
                description=sent.get("description", ""),
                reason=sent.get("reason", ""),
                preview=sent.get("preview", ""),
                assignees=tuple(targets or run_targets),
                required_approvals=sent.get("required_approvals", 1),
            )
        )
    if errors:
        raise Invalid(FIELD_ERRORS_DETAIL, code="invalid", errors=errors)
    if mismatched:
        raise Invalid(
            "arguments_sha256 is not the SHA-256 of the arguments' RFC 8785 canonical bytes: "
            + "; ".join(mismatched),
            code="arguments_sha256",
        )
    return calls


def _arguments_problem(arguments: Any) -> str | None:
    if not isinstance(arguments, dict):
        return "the arguments are a JSON object"
    if json_depth_exceeds(arguments, settings.DESK_JSON_MAX_DEPTH):
        return f"the arguments nest deeper than {settings.DESK_JSON_MAX_DEPTH} levels"
    if json_holds_nul(arguments):
        return "Null characters are not allowed."
    try:
        size = len(canonical_json(arguments))
    except ValueError as exc:
        return f"the arguments cannot be canonicalised (RFC 8785): {exc}"
    if size > ARGUMENTS_MAX_BYTES:
        return f"the arguments' canonical JSON is {size} bytes, over the {ARGUMENTS_MAX_BYTES} allowed"
    return None


def _verdicts(sent: Any, *, has_schema: bool) -> tuple[tuple[str, ...], str | None]:
    """The verdicts the framework can carry out, in the desk's order; edit only with a schema to
    check an edit against (dropped otherwise: the response says which were kept)."""
    listed = list(EXTERNAL_VERDICTS) if sent is None else list(sent)
    unknown = [v for v in listed if v not in EXTERNAL_VERDICTS]
    if unknown:
        return (), f"unknown verdicts {unknown}; a call is answered with {', '.join(EXTERNAL_VERDICTS)}"
    missing = [v for v in REQUIRED_VERDICTS if v not in listed]
    if missing:
        return (), f"a call must take {', '.join(REQUIRED_VERDICTS)}; missing {', '.join(missing)}"
    kept = tuple(v for v in EXTERNAL_VERDICTS if v in listed and (v != Verdict.EDIT or has_schema))
    return kept, None


def _targets(submitter: User, targets: list[str], where: str) -> list[str]:
    """Reviewers named by a submit: active reviewers and existing groups ("group:NAME"), never
    the submitter (four eyes)."""
    targets = list(dict.fromkeys(targets))
    names = [t for t in targets if not t.startswith(GROUP_PREFIX)]
    groups = [t[len(GROUP_PREFIX) :] for t in targets if t.startswith(GROUP_PREFIX)]
    known = set(
        get_user_model()
        .objects.filter(username__in=names, is_active=True, groups__name=REVIEWERS)
        .values_list("username", flat=True)
    )
    known_groups = set(Group.objects.filter(name__in=groups).values_list("name", flat=True))
    problems = [f"{name!r} is not a reviewer" for name in names if name not in known]
    problems += [f"no group {group!r}" for group in groups if group not in known_groups]
    if submitter.get_username() in names:
        problems.append("the submitter cannot review their own run")
    if problems:
        raise Invalid(FIELD_ERRORS_DETAIL, code="invalid", errors={where: problems})
    return targets


def _check_context(context: dict[str, Any] | None) -> None:
    if context is None:
        return
    for index, message in enumerate(context.get("messages", [])):
        if message.get("role") not in CONTEXT_ROLES:
            raise _invalid(f"context.messages[{index}].role", f"one of {', '.join(CONTEXT_ROLES)}")
    if json_holds_nul(context):
        raise _invalid("context", "Null characters are not allowed.")
    size = len(canonical_json(context))
    if size > CONTEXT_MAX_BYTES:
        raise _invalid("context", f"{size} bytes of canonical JSON, over the {CONTEXT_MAX_BYTES} allowed")


def _invalid(where: str, message: str) -> Invalid:
    return Invalid(FIELD_ERRORS_DETAIL, code="invalid", errors={where: [message]})


# --- the rows ------------------------------------------------------------------------------------


def _run_for(submitter: User, submission: ExternalSubmission) -> tuple[Run, bool]:
    """The external run by (submitter, external id), its row locked; created when new. Two
    first submits racing: the second meets the unique constraint and reads the first's row."""
    existing = _run_locked(submitter, submission.external_id)
    if existing is not None:
        return existing, False
    ttl = submission.approval_ttl_seconds or settings.DESK_APPROVAL_TTL_SECONDS
    run = Run(
        kind=RunKind.EXTERNAL,
        framework=submission.framework,
        external_id=submission.external_id,
        title=submission.title,
        context=submission.context,
        agent=submission.agent,
        input=submission.input,
        model=None,
        reviewers=list(dict.fromkeys(submission.reviewers)),
        approval_ttl_seconds=ttl,
        metadata=submission.metadata,
        submitted_by=submitter,
        status=RunStatus.INPUT_REQUIRED,
    )
    try:
        with transaction.atomic():
            run_insert(run)
    except IntegrityError:
        existing = _run_locked(submitter, submission.external_id)
        if existing is None:
            raise
        return existing, False
    run.submitted_by = submitter
    return run, True


def _run_locked(submitter: User, external_id: str) -> Run | None:
    run = (
        Run.objects.select_for_update()
        .filter(kind=RunKind.EXTERNAL, submitted_by=submitter, external_id=external_id)
        .first()
    )
    if run is not None:
        run.submitted_by = submitter
    return run


def _calls_met(run: Run, calls: list[ExternalCall]) -> dict[str, ApprovalRequest]:
    """The requests these calls made before (the latest per call id); 409 `conflict` for one
    sent again with other arguments or for another tool: a framework's call id names one call."""
    ids = [call.tool_call_id for call in calls]
    met: dict[str, ApprovalRequest] = {}
    for approval in (
        ApprovalRequest.objects.filter(run=run, kind=ApprovalKind.TOOL_CALL, tool_call_id__in=ids)
        .select_related("run", "run__submitted_by", "checkpoint")
        .prefetch_related("decisions__reviewer")
        .order_by("created_at")
    ):
        met[approval.tool_call_id] = approval
    for call in calls:
        before = met.get(call.tool_call_id)
        if before is not None and before.arguments_sha256 != call.arguments_sha256:
            raise Conflict(
                f"the call {call.tool_call_id!r} was submitted before with other arguments "
                f"(arguments_sha256 {before.arguments_sha256})",
                code="conflict",
            )
        # The hash covers the arguments only: the same id and arguments for another tool is
        # another call, which the first one's approval (maybe approved) must not answer.
        if before is not None and before.tool != call.tool:
            raise Conflict(
                f"the call {call.tool_call_id!r} was submitted before for the tool {before.tool!r}",
                code="conflict",
            )
    return met


def _checkpoint_for(run: Run, external_checkpoint: str) -> Checkpoint:
    """The desk checkpoint standing for the framework's: one row per value, numbered in order.
    The run's row is locked, so no other submit numbers its checkpoints meanwhile."""
    found = Checkpoint.objects.filter(run=run, snapshot__external_checkpoint=external_checkpoint).first()
    if found is not None:
        return found
    last = Checkpoint.objects.filter(run=run).aggregate(n=Max("number"))["n"] or 0
    created = Checkpoint.objects.create(
        run=run,
        number=last + 1,
        schema_version=0,
        message_count=0,
        snapshot={"external_checkpoint": external_checkpoint},
    )
    return created
