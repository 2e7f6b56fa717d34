"""Standing grants ("always allow") on the database: create with an approve, use, revoke, read.

`grant_check_input` authorises and validates a `grant` object in the decide transaction
(after `approval_check_decide` locked the run and the approval); `grant_do_create` signs
and stores it with the decision. `grant_use` is the gate's half: one conditional UPDATE
that counts a use only while the grant is unrevoked, unexpired and under its signed limit,
so two workers racing for the last use cannot both win, and a revocation stops the very
next call. The signed payload and its matching are the runtime's (`agents.grants`).

Who may grant what (403): any reviewer who may decide the approval may grant for this run
(`run`) or this agent (`agent`); granting everywhere (`global`) takes an admin. Whatever the
scope, the gate uses a grant only on runs its grantor could decide (four eyes, assignment).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import F, OuterRef, Q, QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from agents.canonical import sha256_hex
from agents.grants import MATCH_EXACT, SignedGrant, constraint_errors, grant_mismatch, grant_payload
from agents.ledger import CallBinding
from agents.state import CallState
from agents.tools import Tool
from reviewdesk.accounts.roles import is_admin, is_reviewer
from reviewdesk.approvals import signing
from reviewdesk.approvals.device import device_decision_required
from reviewdesk.approvals.models import (
    ApprovalKind,
    ApprovalRequest,
    Decision,
    Grant,
    GrantScope,
    GrantUse,
    Verdict,
)
from reviewdesk.approvals.routing import named_for_call
from reviewdesk.approvals.selectors import user_may_decide
from reviewdesk.approvals.validation import FIELD_ERRORS_DETAIL
from reviewdesk.audit.services import audit_record
from reviewdesk.db import ExistsPerRow
from reviewdesk.db_rows import Columns, column, fetchall, prep, table
from reviewdesk.errors import Conflict, Forbidden, Invalid, NotFound
from reviewdesk.runs.models import Attempt, Run
from reviewdesk.runs.selectors import runs_visible_to

GRANT_FIELDS = ("match", "scope", "expires_at", "max_uses")


@dataclass(frozen=True)
class GrantSpec:
    """A validated `grant` object: what `grant_do_create` signs."""

    constraints: dict[str, Any] | None  # None: the exact call
    scope: str
    expires_at: datetime
    max_uses: int


def _field_errors(grant: dict[str, Any], tool: Tool, now: datetime) -> dict[str, list[str]]:
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
    *, grant: Any, approval: ApprovalRequest, reviewer: Any, verdict: str, tool: Tool
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


def grant_do_create(*, spec: GrantSpec, decision: Decision, run: Run, reviewer: Any) -> Grant:
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
        agent=run.agent,
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
        agent=run.agent,
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


def live_grants_for(*, run: Run, tool: str) -> list[Grant]:
    """The grants that may still allow a call of `tool` in `run` (not revoked, not expired, not
    used up; scoped to the run, its agent, or everywhere), newest first, each with its maker:
    one hand-written statement, asked before every call that would need a human (issue 11). A
    pre-filter only: the gate verifies the grant's signature, and counting its use re-reads the
    row (`grant_use`), so a grant revoked or used up meanwhile is refused there."""
    user_model = get_user_model()
    g, u = Columns.of(Grant, "g"), Columns.of(user_model, "u")
    sql = (
        f"SELECT {g.sql}, {u.sql} FROM {table(Grant)} g "
        f"JOIN {table(user_model)} u ON u.{column(user_model, 'id')} = g.{column(Grant, 'granted_by')} "
        f"WHERE g.{column(Grant, 'revoked_at')} IS NULL AND g.{column(Grant, 'expires_at')} > %s "
        f"AND g.{column(Grant, 'uses')} < g.{column(Grant, 'max_uses')} AND g.{column(Grant, 'tool')} = %s "
        f"AND ((g.{column(Grant, 'scope')} = %s AND g.{column(Grant, 'run')} = %s) "
        f"OR (g.{column(Grant, 'scope')} = %s AND g.{column(Grant, 'agent')} = %s) OR g.{column(Grant, 'scope')} = %s) "
        # Newest first, as the ORM's query came (Grant.Meta.ordering): the caller's sort is
        # stable, so two grants alike in scope and expiry are tried newest first.
        f"ORDER BY g.{column(Grant, 'created_at')} DESC"
    )
    params = [
        prep(Grant, "expires_at", timezone.now()),
        tool,
        GrantScope.RUN.value,
        prep(Grant, "run", run.pk),
        GrantScope.AGENT.value,
        run.agent,
        GrantScope.GLOBAL.value,
    ]
    rows = fetchall(sql, params)
    grants = []
    for row in rows:
        grant = g.build(row)
        grant.granted_by = u.build(row, g.width)
        grants.append(grant)
    return grants


def grant_matching_call(*, run: Run, call: CallState) -> str | None:
    """The id of the narrowest live grant covering this call of `run` (run, then agent, then
    global; soonest expiry first), or None. The gate verifies the signed payload later."""
    candidates = live_grants_for(run=run, tool=call.name)
    order = {GrantScope.RUN: 0, GrantScope.AGENT: 1, GrantScope.GLOBAL: 2}
    for grant in sorted(candidates, key=lambda g: (order[GrantScope(g.scope)], g.expires_at)):
        covers = grant_mismatch(
            grant.payload, agent=run.agent, run_id=str(run.pk), tool=call.name, arguments=call.arguments
        )
        # as the gate will check: its maker could decide this very call
        if covers is None and grantor_may_decide(grant.granted_by, run, call.name, call.arguments):
            return str(grant.pk)
    return None


def grantor_may_decide(user: Any, run: Run, tool: str, arguments: Any) -> bool:
    """Whether a grant's maker could decide this very call (its routing, not only the run)."""
    return user_may_decide(user, run) and named_for_call(user, run, tool, arguments)


def grantor_may_decide_run(username: str, run_id: str, tool: str, arguments: Any) -> bool:
    """The gate's check, at execution time, that a grant's maker could decide this call of the
    run: a reviewer, not the run's submitter, the run not assigned to others, and named by the
    targets the call would be routed to (a grant never decides what its maker could not)."""
    user = get_user_model().objects.filter(username=username).first()
    run = Run.objects.filter(pk=run_id).first()
    if user is None or run is None:
        return False
    return grantor_may_decide(user, run, tool, arguments)


def signed_grant(grant_id: str) -> SignedGrant | None:
    grant = Grant.objects.filter(pk=grant_id).first()
    if grant is None:
        return None
    return SignedGrant(
        grant_id=str(grant.pk), payload=grant.payload, signature=grant.signature, key_id=grant.key_id
    )


def grant_is_live(grant_id: str) -> bool:
    """Neither revoked nor expired now, its uses aside (see `Ledger.grant_live`)."""
    return Grant.objects.filter(pk=grant_id, revoked_at__isnull=True, expires_at__gt=timezone.now()).exists()


def grant_use(*, grant_id: str, binding: CallBinding, max_uses: int, attempt: Attempt | None) -> bool:
    """Count one use of the grant for this call; False when it is revoked, expired or has
    `max_uses` (the signed limit) uses already. Audited with the grant that allowed the call.

    Lock precondition: the caller's transaction also writes the call's ledger row, so the
    use and the row commit together. The conditional UPDATE takes the grant row's lock and
    re-checks its condition after any concurrent use commits (PostgreSQL re-evaluates the
    WHERE on the updated row; SQLite's IMMEDIATE transactions serialise writers).
    """
    now = timezone.now()
    counted = Grant.objects.filter(
        pk=grant_id, revoked_at__isnull=True, expires_at__gt=now, uses__lt=max_uses
    ).update(uses=F("uses") + 1)
    if counted != 1:
        return False
    grant = Grant.objects.select_related("granted_by").get(pk=grant_id)
    GrantUse.objects.create(
        grant=grant,
        run_id=binding.run_id,
        tool_call_id=binding.tool_call_id,
        idempotency_key=binding.idempotency_key,
        number=grant.uses,
        used_at=now,
    )
    audit_record(
        actor=None,
        action="grant.used",
        subject_type="grant",
        subject_id=grant.pk,
        data={
            "run": binding.run_id,
            "tool_call_id": binding.tool_call_id,
            "tool": binding.tool,
            "attempt": attempt.number if attempt else None,
            "use": grant.uses,
            "max_uses": grant.max_uses,
            "granted_by": grant.granted_by.get_username(),
        },
    )
    return True


# --- reading and revoking --------------------------------------------------------------

GRANT_STATUSES = ("live", "revoked", "expired", "used_up")


def grant_status(grant: Grant) -> str:
    """live, revoked, expired or used_up (the first that applies, in that order of precedence
    after revoked)."""
    if grant.revoked_at is not None:
        return "revoked"
    if grant.expires_at <= timezone.now():
        return "expired"
    return "used_up" if grant.uses >= grant.max_uses else "live"


def grant_filter_status(grants: QuerySet[Grant], status: str) -> QuerySet[Grant]:
    now = timezone.now()
    if status == "revoked":
        return grants.filter(revoked_at__isnull=False)
    unrevoked = grants.filter(revoked_at__isnull=True)
    if status == "expired":
        return unrevoked.filter(expires_at__lte=now)
    if status == "used_up":
        return unrevoked.filter(expires_at__gt=now, uses__gte=F("max_uses"))
    return unrevoked.filter(expires_at__gt=now, uses__lt=F("max_uses"))


def grants_visible_to(user: Any) -> QuerySet[Grant]:
    """Admins see every grant; a reviewer the grants they made and those made on an approval of
    a run they may see. A grant carries its source call's arguments (an exact grant) and names
    its run, whatever its scope, so it is exactly as private as that run. Each grant's run is
    checked on its own (a few grants, many runs): an IN over every run the reviewer may see
    read all of them for each page (113 ms at 100,000 runs and 300 grants on PostgreSQL; now 3)."""
    grants = Grant.objects.select_related("granted_by", "revoked_by", "run")
    if is_admin(user):
        return grants
    if not is_reviewer(user):
        return grants.none()
    its_run = runs_visible_to(user).filter(approvals=OuterRef("approval"))
    return grants.filter(Q(granted_by=user) | Q(ExistsPerRow(its_run)))


def grant_get_for_user(*, grant_id: Any, user: Any) -> Grant:
    try:
        grant = grants_visible_to(user).filter(pk=grant_id).first()
    except (ValueError, TypeError):
        grant = None
    if grant is None:
        raise NotFound("no such grant")
    return grant


def grant_may_revoke(user: Any, grant: Grant) -> bool:
    return is_admin(user) or (is_reviewer(user) and grant.granted_by_id == user.pk)


def grant_revoke(*, grant_id: Any, user: Any) -> Grant:
    """Revoke the grant at once: every later use re-reads `revoked_at` and is refused.
    Only its grantor or an admin may; revoking twice is 409."""
    with transaction.atomic():
        grant = grant_get_for_user(grant_id=grant_id, user=user)
        if not grant_may_revoke(user, grant):
            raise Forbidden("only the grant's owner or an admin may revoke it")
        revoked = Grant.objects.filter(pk=grant.pk, revoked_at__isnull=True).update(
            revoked_at=timezone.now(), revoked_by=user
        )
        if revoked != 1:
            raise Conflict("this grant was already revoked", code="revoked")
        grant.refresh_from_db()
        audit_record(
            actor=user,
            action="grant.revoked",
            subject_type="grant",
            subject_id=grant.pk,
            data={"uses": grant.uses, "max_uses": grant.max_uses, "tool": grant.tool},
        )
    return grant
