"""How an approval reads to a client: the one shape of its payload (`approval_data`), built
from a model or from a page of `values()` rows alike, and as one user may read it
(`approval_for`, `message_for`). Desk events, the API, the socket's snapshot, the desk's
pages and the webhooks all take it from here."""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable
from typing import Any

from django.db.models import Prefetch, QuerySet

from agents.decisions import is_device_signed, payload_bytes
from agents.registry import UnknownAgent, get_agent
from reviewdesk.accounts.targets import UsernamesNamed, usernames_named
from reviewdesk.approvals.models import (
    DECISION_LIST,
    KIND_VERDICTS,
    ApprovalRequest,
    Decision,
    approving_votes,
    settling_decision,
)
from reviewdesk.lib.times import rfc3339_sortable
from reviewdesk.runs.models import RunKind

# How a payload expands the groups its assignees name: `usernames_named`, or for a page of
# approvals an `UsernamesNamed` that read every group on the page at once.
Expand = Callable[[Iterable[str]], list[str]]


# What an approval's payload shows, named as `values()` names them: a page of approvals is read as
# these columns (`approvals_page_data`), and `approval_data` reads the same names off a model.
# An ApprovalRequest, its Run and two users built for each row of a page cost more than the
# payload itself (`make bench` #7b: ~50 µs a row).
SHOWN = (
    "id",
    "kind",
    "run_id",
    "tool",
    "tool_call_id",
    "arguments",
    "arguments_sha256",
    "reason",
    "assignees",
    "required_approvals",
    "quorum_groups",
    "handed_over_by_id",
    "handed_over_by__username",
    "handed_over_at",
    "handover_note",
    "expires_at",
    "respond_by",
    "reminded_at",
    "escalation_level",
    "checkpoint_id",
    "status",
    "created_at",
    "run__agent",
    "run__input",
    "run__submitted_by__username",
    # An external run's call (runs/external/): what its framework can do with it.
    "verdicts",
    "arguments_schema",
    "description",
    "preview",
    "resume_policy",
    "run__kind",
    "run__framework",
    "run__external_id",
    "run__title",
    "provenance",
    "reading",
)


def approval_data(approval: ApprovalRequest, *, named: Expand = usernames_named) -> dict[str, Any]:
    return _payload(_shown_of(approval), approval.decision, approval.approving_decisions(), named)


def approvals_page_data(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`approval_data` for each of a page of approvals read as `SHOWN` (`approval_columns`), with
    two reads whatever the page: their decisions, and the groups their assignees name."""
    decisions: dict[Any, list[Decision]] = {row["id"]: [] for row in rows}
    for decision in _decisions_shown().filter(request_id__in=list(decisions)):
        decisions[decision.request_id].append(decision)
    named = UsernamesNamed(row["assignees"] for row in rows)
    return [
        _payload(
            row,
            settling_decision(row["status"], decisions[row["id"]]),
            approving_votes(row["kind"], decisions[row["id"]]),
            named,
        )
        for row in rows
    ]


def approval_columns(approvals: QuerySet[ApprovalRequest]) -> QuerySet:
    """`approvals` as the columns their payloads show (`approvals_page_data` builds them)."""
    return approvals.values(*SHOWN)


def _shown_of(approval: ApprovalRequest) -> dict[str, Any]:
    """The model's `SHOWN`, followed as `values()` follows them (a null relation: None)."""
    return {name: _follow(approval, name) for name in SHOWN}


def _follow(value: Any, path: str) -> Any:
    for name in path.split("__"):
        if value is None:
            return None
        value = getattr(value, name)
    return value


def _payload(
    shown: dict[str, Any], decision: Decision | None, approving: list[Decision], named: Expand
) -> dict[str, Any]:
    """The one shape of an approval's payload, from its `SHOWN` columns and its decisions: the
    one settling it (None while pending) and the quorum's votes."""
    return {
        "id": str(shown["id"]),
        "kind": shown["kind"],
        "run": str(shown["run_id"]),
        "tool": shown["tool"],
        "tool_call_id": shown["tool_call_id"],
        "arguments": shown["arguments"],
        "arguments_sha256": shown["arguments_sha256"],
        "reason": shown["reason"],
        # Who may decide: `targets` as named (usernames, "group:NAME"; empty: any reviewer) and
        # `users`, the usernames they name with groups expanded (the desk's "mine").
        "reviewer": {
            "users": named(shown["assignees"]),
            "targets": list(shown["assignees"]),
            "group": "reviewers",
        },
        "expires_at": rfc3339_sortable(shown["expires_at"]),
        # The response-time clock (approvals/lifecycle/clock.py): null when the tool sets no target.
        "respond_by": rfc3339_sortable(shown["respond_by"]),
        "reminded_at": rfc3339_sortable(shown["reminded_at"]),
        "escalation_level": shown["escalation_level"],
        "checkpoint_id": str(shown["checkpoint_id"]),
        "status": shown["status"],
        "created_at": rfc3339_sortable(shown["created_at"]),
        "decision": decision_data(decision) if decision else None,
        # How many approvals the request needs and who has given theirs: the desk's "1 of 2".
        "quorum": {
            "required": shown["required_approvals"],
            "approved_by": [d.reviewer.get_username() for d in approving],
            "groups": list(shown["quorum_groups"]),
        },
        "handover": _handover(shown),
        # What the desk's card shows besides the call: who asked, for what, and its risk.
        "agent": shown["run__agent"],
        "submitted_by": shown["run__submitted_by__username"],
        # An external run may send a title and no input (a Claude session, the MCP gateway).
        "task": (shown["run__input"] or shown["run__title"])[:TASK_SHOWN],
        "effect": ""
        if shown["run__kind"] == RunKind.EXTERNAL
        else _effect(shown["run__agent"], shown["tool"]),
        # The verdicts that answer it: an external call's own list, else its kind's.
        "verdicts": list(shown["verdicts"] or KIND_VERDICTS[shown["kind"]]),
        "external": _external(shown),
        # Where each argument came from (agents.provenance): {pointer: [source, ...]}, or None
        # when not known; and the warnings that raised, which the desk shows on the card.
        "provenance": (shown["provenance"] or {}).get("sources") if shown["provenance"] else None,
        "provenance_flags": list((shown["provenance"] or {}).get("flags") or []),
        # A model's advisory reading (approvals/lifecycle/reading.py): advice, never a decision.
        "reading": shown["reading"],
    }


def _external(shown: dict[str, Any]) -> dict[str, Any] | None:
    """What an external run's call carries besides (None for a desk run's): its framework and
    the framework's ids, the edit schema, how the framework resumes, and the texts it sent,
    which, like `reason`, are the model's or the adapter's and untrusted."""
    if shown["run__kind"] != RunKind.EXTERNAL:
        return None
    return {
        "framework": shown["run__framework"],
        "external_id": shown["run__external_id"],
        "resume_policy": shown["resume_policy"],
        "schema": shown["arguments_schema"],
        "description": shown["description"],
        "preview": shown["preview"],
    }


def _handover(shown: dict[str, Any]) -> dict[str, Any] | None:
    if shown["handed_over_by_id"] is None:
        return None
    return {
        "by": shown["handed_over_by__username"],
        "at": rfc3339_sortable(shown["handed_over_at"]),
        "note": shown["handover_note"],
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
    joined: tuple[str, ...] = ("handed_over_by",)
    shown: tuple[str, ...] = ("handed_over_by__username",)
    if with_run:
        joined += ("run__submitted_by",)
        shown += (
            "run__agent",
            "run__input",
            "run__status",
            "run__submitted_by__username",
            "run__kind",
            "run__framework",
            "run__external_id",
            "run__title",
        )
    return (
        approvals.select_related(*joined)
        .only(*own, *shown)
        .prefetch_related(Prefetch("decisions", queryset=_decisions_shown(), to_attr=DECISION_LIST))
    )


def _decisions_shown() -> QuerySet[Decision]:
    """Decisions with their reviewers' usernames, not their users."""
    voted = [field.name for field in Decision._meta.concrete_fields]
    return Decision.objects.select_related("reviewer").only(*voted, "reviewer__username")


TASK_SHOWN = 280  # characters of the run's input on a card; the approval page shows it whole


def _effect(agent: str, tool_name: str) -> str:
    """The tool's effect kind ("external" is irreversible), or "" when it is not declared."""
    try:
        tool = get_agent(agent).tool(tool_name)
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
        "decided_at": rfc3339_sortable(decision.decided_at),
        "payload": decision.payload,
        # The exact bytes signed (the payload's RFC 8785 canonical JSON), base64: a verifier
        # checks the signature over these and parses them, re-canonicalising nothing.
        "payload_b64": base64.b64encode(payload_bytes(decision.payload)).decode(),
        "signature": decision.signature,
        "key_id": decision.key_id,
        "signer": "device" if is_device_signed(decision.payload) else "server",
        "consumed_at": rfc3339_sortable(decision.consumed_at),
        "answer": decision.answer,
        # What the reviewer was told when deciding (a model's advice), and an edit's sources.
        "reading": decision.reading,
        "provenance": decision.provenance,
    }
