"""What the desk shows of a pending call besides its payload: the tool's preview as a summary
(its key facts, the first lines of its body, its warnings), one risk line, what would make
approving it unusual (and so confirmed in a dialog, and never swept into a batch by "select
all similar"), and its place in the queue's order. The page's cards, the socket's snapshot and
the card endpoint for a live call all take it from here (`desk_view`), and desk_card.js only draws it:
the browser restates none of these rules.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from reviewdesk.approvals.models import ApprovalKind, ApprovalRequest
from reviewdesk.approvals.reads.context import approval_preview, external_preview
from reviewdesk.approvals.reads.queue import queue_sort_key
from reviewdesk.approvals.signing import device_decision_required, device_decisions_required_everywhere
from reviewdesk.desk.templatetags.desk_json import has_invisible

# The preview rows a reviewer decides by, by their label (any case): the recipient and subject
# of a mail, the amount and what is left of a refund, where a command runs. A preview that has
# none of these shows its first rows.
KEY_LABELS = (
    "to",
    "recipient",
    "subject",
    "this refund",
    "amount",
    "left after it",
    "order",
    "working directory",
)
FIRST_ROWS = 3
EXTERNAL_ROWS = 8  # an external call's arguments shown as facts (its top-level fields)
# The first lines of a preview's body (a mail's text, a command) shown in the queue.
BODY_LINES = 3
BODY_CHARS = 280
FACT_CHARS = 160


def desk_view(payload: dict[str, Any], *, username: str) -> dict[str, Any]:
    """The desk's view of one approval's payload (`approval_data`), for `username`: {"sort_key",
    "summary"}; `summary` is None for a call that is not a tool call (a question, a reconcile)."""
    view: dict[str, Any] = {"sort_key": queue_sort_key(payload, username), "summary": None}
    if payload["kind"] == ApprovalKind.TOOL_CALL:
        view["summary"] = call_summary(payload)
    return view


def with_desk_view(payloads: list[dict[str, Any]], *, username: str) -> list[dict[str, Any]]:
    return [{**p, "desk": desk_view(p, username=username)} for p in payloads]


def call_summary(payload: dict[str, Any], *, preview: dict[str, Any] | None = None) -> dict[str, Any]:
    """The preview as the queue reads it: {"title", "facts": [[label, value]...], "body": first
    lines or None, "warnings", "invisible", "risk": one line or "", "unusual": [why approving
    it asks first], "device_key": the tool runs only on a device-signed decision}. `preview`:
    `approval_preview` of the payload's arguments when the caller already has it (a preview may
    read the tool's world: once is enough)."""
    external = payload.get("external")
    if preview is not None:
        result = preview
    elif external:  # no desk code runs for a framework's call: its arguments, checked and shown
        result = external_preview(
            tool=payload["tool"], schema=external["schema"], arguments=payload["arguments"]
        )
    else:
        result = approval_preview(_stand_in(payload), payload["arguments"])
    preview = result["preview"] or {}
    rows = [(str(label), str(value)) for label, value in preview.get("rows") or []]
    # A framework's call has no desk preview to pick from: its arguments are its rows, all shown.
    keyed = [] if external else [row for row in rows if row[0].strip().lower() in KEY_LABELS]
    shown = rows[:EXTERNAL_ROWS] if external else (keyed or rows[:FIRST_ROWS])
    facts = [[label, _shortened(value, FACT_CHARS)] for label, value in shown]
    body = preview.get("body")
    warnings = [str(w) for w in (preview.get("warnings") or [])] + [str(e) for e in result["errors"]]
    invisible = has_invisible(payload["arguments"])
    irreversible = payload.get("effect") == "external"
    unusual = list(warnings)
    if invisible:
        unusual.append("the arguments contain invisible characters (shown escaped)")
    quorum = payload.get("quorum") or {}
    if quorum.get("required", 1) > 1 and len(quorum.get("approved_by", [])) == quorum["required"] - 1:
        unusual.append(f"yours is the last of {quorum['required']} approvals: approving runs it")
    return {
        "title": str(preview.get("title", "")),
        "facts": facts,
        "body": _first_lines(str(body)) if body is not None else None,
        "warnings": warnings,
        "invisible": invisible,
        "risk": risk_line(irreversible, warnings, invisible),
        "unusual": unusual,
        "device_key": device_decisions_required_everywhere()
        if external
        else device_decision_required(agent=payload.get("agent") or "", tool=payload["tool"]),
    }


def risk_line(irreversible: bool, warnings: list[str], invisible: bool) -> str:
    """One line, only when something is unusual: the first warning (and how many more), the
    invisible characters, and the effect beside them. An irreversible call with nothing unusual
    has its badge and no line: a red line on every email would mark nothing."""
    parts = []
    if warnings:
        more = f" (+{len(warnings) - 1} more)" if len(warnings) > 1 else ""
        parts.append(f"⚠ {warnings[0]}{more}")
    if invisible:
        parts.append("⚠ invisible characters")
    if parts and irreversible:
        parts.append("irreversible")
    return " · ".join(parts)


def _first_lines(text: str) -> str:
    lines = text.splitlines()
    shown = "\n".join(lines[:BODY_LINES])
    cut = len(lines) > BODY_LINES or len(shown) > BODY_CHARS
    return _shortened(shown, BODY_CHARS) if len(shown) > BODY_CHARS else shown + ("\n…" if cut else "")


def _shortened(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _stand_in(payload: dict[str, Any]) -> ApprovalRequest:
    """What `approval_preview` reads of an approval, from its payload: no database read for a
    call the desk already holds (the preview itself may read the tool's world)."""
    return cast(
        ApprovalRequest,
        SimpleNamespace(
            run=SimpleNamespace(agent=payload.get("agent") or "", is_external=False),
            run_id=payload["run"],
            tool_call_id=payload["tool_call_id"],
            tool=payload["tool"],
        ),
    )
