"""How a run, a grant and an agent look in the API (the contract's field names): a run whole,
with its approvals (their one shape is `approvals.reads.representation`'s), messages, side
effects, attempts and thread; a standing grant with its status; a loaded agent with its tools
(a part of `agents.catalog`'s description)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agents.catalog import describe_agent
from agents.registry import Agent
from reviewdesk.accounts.roles import is_admin
from reviewdesk.accounts.targets import UsernamesNamed, usernames_named
from reviewdesk.approvals.grants.access import grant_status
from reviewdesk.approvals.models import Grant
from reviewdesk.approvals.reads.representation import (
    Expand,
    approval_data,
    approval_for,
)
from reviewdesk.lib.times import rfc3339_sortable
from reviewdesk.runs.models import Run

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def run_summary(run: Run) -> dict[str, Any]:
    return {
        "id": str(run.id),
        "kind": run.kind,
        "framework": run.framework,
        "external_id": run.external_id,
        "title": run.title,
        # An external run's context messages, as its framework sent them: untrusted.
        "context": run.context,
        "agent": run.agent,
        "status": run.status,
        "input": run.input,
        "output": run.output,
        "error": run.error,
        "error_kind": run.error_kind or None,
        "submitted_by": run.submitted_by.username,
        "reviewers": run.reviewers,
        "approval_ttl_seconds": run.approval_ttl_seconds,
        "metadata": run.metadata,
        "revision": run.revision,
        "created_at": rfc3339_sortable(run.created_at),
        "updated_at": rfc3339_sortable(run.updated_at),
    }


def run_details(runs: list[Run], *, viewer: User) -> list[dict[str, Any]]:
    """`run_detail` for a page of runs (their relations prefetched), the groups their approvals'
    assignees name read once for the page."""
    named = UsernamesNamed(a.assignees for run in runs for a in run.approvals.all())
    return [run_detail(run, viewer=viewer, named=named) for run in runs]


def run_detail(
    run: Run, *, viewer: User, new: bool = False, named: Expand = usernames_named
) -> dict[str, Any]:
    """The run with its relations, as `viewer` (the user it is answered to) may read it: each
    approval through `approval_for`, the rule the desk socket applies to a hand-over's note.
    `new`: created by this request, so it has none of them yet and none is read (six
    statements off a submit). `named` as for `approval_data`."""
    username, admin = viewer.get_username(), is_admin(viewer)

    def rows(relation: str) -> Any:
        # .all() and sorting here, so a list view's prefetch_related serves every run.
        return () if new else getattr(run, relation).all()

    latest = max(rows("checkpoints"), key=lambda c: c.number, default=None)
    return {
        **run_summary(run),
        "model": run.model,
        "checkpoint_id": str(latest.id) if latest else None,
        "approvals": [
            approval_for(approval_data(a, named=named), username=username, admin=admin)
            for a in sorted(rows("approvals"), key=lambda a: a.created_at)
        ],
        "messages": [
            m.body
            for m in sorted(rows("messages"), key=lambda m: m.position)
            if m.superseded_at is None  # set aside by a retry from an earlier checkpoint
        ],
        "side_effects": [
            {
                "idempotency_key": e.idempotency_key,
                "tool_call_id": e.tool_call_id,
                "tool": e.tool,
                "status": e.status,
                "outcome": e.outcome,  # succeeded, failed, or null until confirmed
                "result": e.result,
                "external_ref": e.external_ref or None,
                "retries": e.retries,  # transient failures so far
                "last_error": e.last_error or None,
                "decision": str(e.decision_id) if e.decision_id else None,
                "created_at": rfc3339_sortable(e.created_at),
                "updated_at": rfc3339_sortable(e.updated_at),
            }
            for e in sorted(rows("side_effects"), key=lambda e: e.created_at)
        ],
        # The follow-up messages that reopened it, each the start of a turn (threads).
        "thread": [
            {
                "number": f.number,
                "input": f.input,
                "position": f.position,
                "posted_by": f.posted_by.username,
                "created_at": rfc3339_sortable(f.created_at),
            }
            for f in sorted(rows("follow_ups"), key=lambda f: f.number)
        ],
        "attempts": [
            {
                "number": a.number,
                "status": a.status,
                "lease_epoch": a.lease_epoch,
                "worker": a.worker,
                "started_at": rfc3339_sortable(a.started_at),
                "ended_at": rfc3339_sortable(a.ended_at),
            }
            for a in sorted(rows("attempts"), key=lambda a: a.number)
        ],
    }


def grant_data(grant: Grant) -> dict[str, Any]:
    return {
        "id": str(grant.id),
        "tool": grant.tool,
        "agent": grant.agent,
        "scope": grant.scope,
        "run": str(grant.run_id) if grant.run_id else None,
        "match": "exact" if grant.constraints is None else grant.constraints,
        "arguments_sha256": grant.arguments_sha256 or None,
        "arguments": grant.arguments,
        "max_uses": grant.max_uses,
        "uses": grant.uses,
        "expires_at": rfc3339_sortable(grant.expires_at),
        "status": grant_status(grant),
        "granted_by": grant.granted_by.get_username(),
        "approval": str(grant.approval_id),
        "decision": str(grant.decision_id),
        "created_at": rfc3339_sortable(grant.created_at),
        "revoked_at": rfc3339_sortable(grant.revoked_at),
        "revoked_by": grant.revoked_by.get_username() if grant.revoked_by else None,
        "payload": grant.payload,
        "signature": grant.signature,
        "key_id": grant.key_id,
    }


# What a client is told of each tool: enough to submit a run and to know which calls wait for a
# human. The policy's function name, routes (which name reviewers) and an MCP pin stay with
# `manage.py agents`.
AGENT_TOOL_FIELDS = (
    "name",
    "description",
    "parameters",
    "effect",
    "approval",
    "grantable",
    "quorum",
    "requires_device_keys",
    "output_trusted",
    "aimed",
    "second_opinion",
)


def agent_data(agent: Agent) -> dict[str, Any]:
    described = describe_agent(agent)
    return {
        "name": described["name"],
        "requires_device_keys": described["requires_device_keys"],
        "tools": [
            {
                **{field: tool[field] for field in AGENT_TOOL_FIELDS},
                "source": {"kind": tool["source"]["kind"], "name": tool["source"]["name"]},
            }
            for tool in described["tools"]
        ],
    }
