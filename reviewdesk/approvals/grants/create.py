"""Standing grants ("always allow") made with an approve.

`grant_check_input` authorises and validates a `grant` object in the decide transaction
(after `approval_check_decide` locked the run and the approval); `grant_do_create` signs
and stores it with the decision. The gate's use of a grant is in `use`, who sees and
revokes one in `access`; the signed payload and its matching are the runtime's
(`agents.grants`).

Who may grant what (403): any reviewer who may decide the approval may grant for this run
(`run`) or this agent (`agent`); granting everywhere (`global`) takes an admin. Whatever the
scope, the gate uses a grant only on runs its grantor could decide (four eyes, assignment).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from agents.canonical import sha256_hex
from agents.grants import MATCH_EXACT, constraint_errors, grant_payload
from agents.tools import Tool
from reviewdesk.accounts.roles import is_admin
from reviewdesk.approvals import signing
from reviewdesk.approvals.models import (
    ApprovalKind,
    ApprovalRequest,
    Decision,
    Grant,
    GrantScope,
    Verdict,
)
from reviewdesk.approvals.signing import device_decision_required
from reviewdesk.audit.services import audit_record
from reviewdesk.lib.errors import FIELD_ERRORS_DETAIL, Forbidden, Invalid
from reviewdesk.runs.models import Run

if TYPE_CHECKING:
    from django.contrib.auth.models import User

GRANT_FIELDS = ("match", "scope", "expires_at", "max_uses")


@dataclass(frozen=True)
class GrantTarget:
    """What a grant is checked against: the tool's name, its JSON Schema (constraints name its
    top-level properties) and whether any grant may allow it (`Tool.accepts_grants`)."""

    name: str
    parameters: dict[str, Any]
    accepts_grants: bool


def grant_target_of_tool(tool: Tool) -> GrantTarget:
    return GrantTarget(name=tool.name, parameters=dict(tool.parameters), accepts_grants=tool.accepts_grants)


def grant_target_of_external(approval: ApprovalRequest) -> GrantTarget:
    """An external run's call: its framework's schema (none: only an exact grant), and no
    grant under a quorum (one reviewer's grant never stands in for several)."""
    return GrantTarget(
        name=approval.tool,
        parameters=dict(approval.arguments_schema or {"type": "object"}),
        accepts_grants=approval.required_approvals == 1,
    )


def grant_agent_of(run: Run) -> str:
    """The agent name a grant made on `run` is scoped to. An external run's is namespaced by its
    framework ("openai-agents:support-bot"): a desk agent of the same name is another agent, and
    the gate's matching (which compares this name) never lets one's grant allow the other's call."""
    return f"{run.framework}:{run.agent}" if run.is_external else run.agent


@dataclass(frozen=True)
class GrantSpec:
    """A validated `grant` object: what `grant_do_create` signs."""

    constraints: dict[str, Any] | None  # None: the exact call
    scope: str
    expires_at: datetime
    max_uses: int


def _field_errors(grant: dict[str, Any], tool: GrantTarget, now: datetime) -> dict[str, list[str]]:
    errors: dict[str, list[str]] = {}
    unknown = sorted(set(grant) - set(GRANT_FIELDS))
    if unknown:
        errors["grant"] = [f"unknown field {name!r}" for name in unknown]
    if grant.get("scope") not in GrantScope.values:
        errors["grant.scope"] = [f"one of {', '.join(GrantScope.values)}"]
    match = grant.get("match", MATCH_EXACT)
    if match != MATCH_EXACT:
        for field, problems in constraint_errors(match, tool.parameters).items():
            errors["grant." + field if field != "match" else "grant.match"] = problems
    max_uses = grant.get("max_uses", settings.DESK_GRANT_DEFAULT_USES)
    if type(max_uses) is not int or not 1 <= max_uses <= settings.DESK_GRANT_MAX_USES:
        errors["grant.max_uses"] = [f"an integer from 1 to {settings.DESK_GRANT_MAX_USES}"]
    if "expires_at" in grant:
        expires_at = _parse_time(grant["expires_at"])
        latest = now + timedelta(seconds=settings.DESK_GRANT_MAX_SECONDS)
        if expires_at is None or not now < expires_at <= latest:
            errors["grant.expires_at"] = [
                f"an RFC 3339 time with a zone, in the future and at most {settings.DESK_GRANT_MAX_SECONDS}s away"
            ]
    return errors


def _parse_time(value: Any) -> datetime | None:
    try:
        parsed = parse_datetime(value) if isinstance(value, str) else None
    except ValueError:
        return None
    return parsed if parsed is not None and parsed.tzinfo is not None else None


def grant_check_input(
    *, grant: Any, approval: ApprovalRequest, reviewer: User, verdict: str, tool: GrantTarget
) -> GrantSpec:
    """Validate the `grant` object of a decision and check its maker may grant that much.

    Lock precondition: inside the decide transaction, after `approval_check_decide`
    (which checked that `reviewer` may decide `approval`). Writes nothing.
    """
    if not isinstance(grant, dict):
        raise Invalid(
            FIELD_ERRORS_DETAIL, errors={"grant": ["an object: match, scope, expires_at, max_uses"]}
        )
    if verdict != Verdict.APPROVE or approval.kind != ApprovalKind.TOOL_CALL:
        raise Invalid(FIELD_ERRORS_DETAIL, errors={"grant": ["a standing grant rides only on an approve"]})
    if not tool.accepts_grants:
        raise Invalid(f"{tool.name} is never grantable: every call asks a reviewer", code="not_grantable")
    # (An external run's agent is not the desk's: only DESK_REQUIRE_DEVICE_KEYS is meant for it,
    # which this asks first; a desk agent of the same name can only make it refuse, never allow.)
    if device_decision_required(agent=approval.run.agent, tool=tool.name):
        raise Invalid(
            f"{tool.name} runs only on decisions signed by a reviewer's device key; a standing grant "
            "is signed by the server, so none may allow it",
            code="not_grantable",
        )
    now = timezone.now()
    errors = _field_errors(grant, tool, now)
    if errors:
        raise Invalid(FIELD_ERRORS_DETAIL, errors=errors)
    if grant["scope"] == GrantScope.GLOBAL and not is_admin(reviewer):
        raise Forbidden("only an admin may grant for every agent (scope global)")
    if grant["scope"] == GrantScope.GLOBAL and approval.run.is_external:
        # Every agent would include the desk's own: an external call grants for its run or agent.
        raise Invalid(
            FIELD_ERRORS_DETAIL, errors={"grant.scope": ["run or agent for an external run's call"]}
        )
    match = grant.get("match", MATCH_EXACT)
    expires_at = _parse_time(grant.get("expires_at")) or now + timedelta(
        seconds=min(settings.DESK_GRANT_DEFAULT_SECONDS, settings.DESK_GRANT_MAX_SECONDS)
    )
    return GrantSpec(
        constraints=None if match == MATCH_EXACT else dict(match),
        scope=grant["scope"],
        expires_at=expires_at,
        max_uses=grant.get("max_uses", settings.DESK_GRANT_DEFAULT_USES),
    )


def grant_do_create(*, spec: GrantSpec, decision: Decision, run: Run, reviewer: User) -> Grant:
    """Sign and store the grant made with `decision`, and audit it.

    Lock precondition: the decide transaction, after `approval_do_decide` stored `decision`.
    """
    approval = decision.request
    grant_id = uuid.uuid4()
    key_id = signing.current_key_id()
    exact = spec.constraints is None
    payload = grant_payload(
        grant_id=str(grant_id),
        tool=approval.tool,
        agent=grant_agent_of(run),
        scope=spec.scope,
        run_id=str(run.pk) if spec.scope == GrantScope.RUN else None,
        arguments_sha256=sha256_hex(approval.arguments) if exact else None,
        constraints=spec.constraints,
        max_uses=spec.max_uses,
        issued_at=decision.decided_at,
        expires_at=spec.expires_at,
        granted_by=reviewer.get_username(),
        approval_id=str(approval.pk),
        key_id=key_id,
    )
    grant = Grant.objects.create(
        id=grant_id,
        approval=approval,
        decision=decision,
        tool=approval.tool,
        agent=grant_agent_of(run),
        scope=spec.scope,
        run=run if spec.scope == GrantScope.RUN else None,
        arguments_sha256=payload["arguments_sha256"] or "",
        arguments=approval.arguments if exact else None,
        constraints=spec.constraints,
        max_uses=spec.max_uses,
        expires_at=spec.expires_at,
        granted_by=reviewer,
        created_at=decision.decided_at,
        payload=payload,
        signature=signing.sign(payload),
        key_id=key_id,
    )
    audit_record(
        actor=reviewer,
        action="grant.created",
        subject_type="grant",
        subject_id=grant.pk,
        data={
            "decision": str(decision.pk),
            "approval": str(approval.pk),
            "run": str(run.pk),
            "tool": grant.tool,
            "scope": grant.scope,
            "match": payload["match"],
            "arguments_sha256": payload["arguments_sha256"],
            "constraints": spec.constraints,
            "max_uses": spec.max_uses,
            "expires_at": payload["expires_at"],
        },
    )
    return grant


# --- the worker's side -----------------------------------------------------------------


# --- reading and revoking --------------------------------------------------------------
